"""The shard work folder of a corpus encode: JsonVectorCollection shards, their records, and resuming.

A corpus encode keeps its finished shards in ``.{corpus}.partial/`` beside the output
(:func:`work_folder`). A rerun keeps them only under the same vector key (state.json:
:mod:`splade_rescale.encoding.vector_key`); another key starts again, with one log line naming what
differs. A record, df file or state.json that does not read back (cut short by a node crash) counts as
unfinished, never as an error to clear by hand.

A shard is final once written: its file is renamed into place and a record beside the work
folder gives its document count, first and last id, size, SHA-256, non-zero count and per-term
document frequencies. Shard, frequencies and record are synced to disk in that order, so a
record survives a node crash only with its shard. A rerun verifies the records and encodes only the rest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from splade_rescale.atomic import replace_dir, write_json
from splade_rescale.encoding.vector_lines import TermStats

log = logging.getLogger(__name__)


MIN_SHARD_DOCS = 1000  # smaller shards would only add files: one Lucene thread indexes ~1,000 docs in seconds


def shard_docs_for(total: int | None, shard_size: int, index_threads: int) -> int:
    """Documents per shard: at most ``shard_size``, and at least ``index_threads`` shards (Anserini
    indexes each file on one thread) as far as the corpus has ``MIN_SHARD_DOCS`` documents for each.

    The count is a multiple of the threads where it can be, so no wave of files leaves threads idle.
    """
    if not total:
        return shard_size
    needed = -(-total // shard_size)
    shards = max(needed, min(index_threads * -(-needed // index_threads), -(-total // MIN_SHARD_DOCS)))
    return -(-total // shards)


@dataclass
class ShardRecord:
    """What a finished shard holds; written after the shard, so its presence means 'final'."""

    shard: int
    docs: int
    first_id: str
    last_id: str
    bytes: int
    sha256: str
    nnz: int
    n_empty: int


def stats_path_for(out: str | Path) -> Path:
    """Where the stats JSON of an output goes: beside it (Anserini would read a file inside)."""
    out = Path(out)
    return out.with_name(out.name + ".stats.json")


def work_folder(out_dir: str | Path) -> Path:
    """Where an encode keeps its finished shards until the corpus is done (beside ``out_dir``)."""
    out_dir = Path(out_dir)
    return out_dir.with_name(f".{out_dir.name}.partial")


class ShardFolder:
    """The work folder of one corpus encode: ``shards/`` (becomes the output), ``records/`` and
    ``state.json`` (the inputs the shards were made under, and the size guard's sample)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shards = root / "shards"
        self.records = root / "records"
        self.state = root / "state.json"
        self._state: dict[str, Any] = {}
        self.shard_docs = 0

    def start(self, inputs: dict[str, Any], shard_docs: int, total: int | None = None) -> list[ShardRecord]:
        """Finished shards of an earlier run under the same ``inputs`` (verified), else a clean folder.

        ``inputs`` names everything the vectors depend on (model, corpus, output settings, precision,
        device type); other inputs start the work again, with one line naming what differs. The shard
        size is a runtime setting: kept shards keep the earlier run's (:attr:`shard_docs`).
        Anything else found in the folder (a shard without a valid record, a half-written file) is deleted.
        """
        inputs = json.loads(json.dumps(inputs))  # as state.json reads back
        earlier = self._read_state()
        finished: list[ShardRecord] = []
        if earlier is not None and earlier.get("inputs") == inputs:
            shard_docs = earlier.get("shard_docs", shard_docs)
            finished = self._verified(shard_docs, total)
        elif earlier is not None:
            log.info("%s: %s: starting again", self.root, _differences(earlier.get("inputs"), inputs))
        self.shard_docs = shard_docs
        self._state = {"inputs": inputs, "shard_docs": shard_docs}
        if finished and "size_sample" in earlier:
            self._state["size_sample"] = earlier["size_sample"]
        if not finished and self.root.exists():
            shutil.rmtree(self.root)
        keep = {path for r in finished for path in (self.shard(r.shard), self.record(r.shard), self.df_path(r.shard))}
        for folder in (self.shards, self.records):
            folder.mkdir(parents=True, exist_ok=True)
            for p in folder.iterdir():
                if p not in keep:
                    p.unlink()
        write_json(self.state, self._state, fsync=True)
        return finished

    @property
    def size_sample(self) -> dict[str, int] | None:
        """The size guard's sample of these inputs (``docs``, gzipped ``bytes``, ``nnz``), once measured."""
        return self._state.get("size_sample")

    def save_size_sample(self, docs: int, shard_bytes: int, nnz: int) -> None:
        """Keep the sample for a resumed run, which then judges the same documents as an uninterrupted one."""
        self._state["size_sample"] = {"docs": docs, "bytes": shard_bytes, "nnz": nnz}
        write_json(self.state, self._state, fsync=True)

    def _read_state(self) -> dict[str, Any] | None:
        """The earlier run's state; None without a folder; ``{}`` when unreadable (a crash cut it short)."""
        if not self.root.exists():
            return None
        try:
            state = json.loads(self.state.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.info("%s: its state.json does not read back (%s): starting again", self.root, type(exc).__name__)
            return {}
        return state if isinstance(state, dict) else {}

    def _verified(self, shard_docs: int, total: int | None) -> list[ShardRecord]:
        """The finished shards in order, up to the first whose record, df file or bytes do not check out."""
        out: list[ShardRecord] = []
        for k in range(len(list(self.records.glob("*.json")))):
            rec = self._record(k, shard_docs, total)
            if rec is None:
                break
            out.append(rec)
            if rec.docs < shard_docs:  # the corpus's last shard
                break
        return out

    def _record(self, k: int, shard_docs: int, total: int | None) -> ShardRecord | None:
        shard = self.shard(k)
        try:
            rec = ShardRecord(**json.loads(self.record(k).read_text(encoding="utf-8")))
            df = np.load(self.df_path(k), allow_pickle=False)
        except (OSError, ValueError, TypeError, EOFError) as exc:
            log.warning("%s: its record or df file does not read back (%s); encoding it again", shard,
                        type(exc).__name__)
            return None
        expected = shard_docs if total is None else min(shard_docs, total - k * shard_docs)
        if (rec.shard != k or not 0 < rec.docs <= expected or df.ndim != 1 or df.dtype != np.int64
                or int(df.sum()) != rec.nnz or (df < 0).any()):  # each document counts a term once: sum = nnz
            log.warning("%s: its record or df file is inconsistent; encoding it again", shard)
            return None
        if not shard.is_file() or shard.stat().st_size != rec.bytes or _sha256(shard) != rec.sha256:
            log.warning("%s: missing, or size or checksum differs from its record; encoding it again", shard)
            return None
        return rec

    def shard(self, k: int) -> Path:
        return self.shards / f"docs-{k:05d}.jsonl.gz"

    def record(self, k: int) -> Path:
        return self.records / f"docs-{k:05d}.json"

    def df_path(self, k: int) -> Path:
        return self.records / f"docs-{k:05d}.df.npy"

    def stats(self, rec: ShardRecord) -> TermStats:
        """A finished shard's statistics, from its record and its df file."""
        out = TermStats()
        out.n, out.nnz, out.n_empty = rec.docs, rec.nnz, rec.n_empty
        out.df = np.load(self.df_path(rec.shard), allow_pickle=False)
        return out

    def finish(self, final: Path) -> None:
        """The shards become ``final`` (atomically); the work folder goes."""
        replace_dir(self.shards, final)
        shutil.rmtree(self.root)


def _differences(earlier: Any, now: dict[str, Any]) -> str:
    """``earlier work was for precision=fp32, device=cpu; now bf16, cuda``: the inputs that differ."""
    if not isinstance(earlier, dict):
        return "earlier work has no readable inputs"
    keys = [k for k in {**earlier, **now} if earlier.get(k) != now.get(k)]
    return (f"earlier work was for {', '.join(f'{k}={_short(earlier.get(k))}' for k in keys)}; "
            f"now {', '.join(_short(now.get(k)) for k in keys)}")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 40 else text[:39] + "…"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()
