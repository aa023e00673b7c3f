"""Resuming a corpus encode: its work folder, the inputs its shards were made under, their records.

A corpus encode keeps its finished shards in ``.{corpus}.partial/`` beside the output
(:func:`work_folder`). A rerun keeps them only under the same inputs (state.json): the model's
content (:func:`model_fingerprint`), the corpus and its document count, the output settings,
the effective precision, the device and the batching (:func:`encoder_numerics`). Other inputs
start again, with one log line naming what differs. A record, df file or state.json that does
not read back (cut short by a node crash) counts as unfinished, never as an error to clear by hand.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np

from splade_rescale.atomic import write_json
from splade_rescale.retrieval.shards import ShardRecord, TermStats

if TYPE_CHECKING:
    from splade_rescale.retrieval.encode import Encoder

log = logging.getLogger(__name__)


def work_folder(out_dir: str | Path) -> Path:
    """Where an encode keeps its finished shards until the corpus is done (beside ``out_dir``)."""
    out_dir = Path(out_dir)
    return out_dir.with_name(f".{out_dir.name}.partial")


def bf16_autocast(enc: Encoder) -> bool | None:
    """Whether the encoder computes under bf16 autocast (``precision: auto`` depends on the device)."""
    from splade_rescale.model.splade import SpladeEncoder, uses_bf16

    return uses_bf16(enc.device, enc.precision) if isinstance(enc, SpladeEncoder) else None


def model_fingerprint(model_dir: str | Path) -> str:
    """SHA-256 over a model folder's file names and contents: a retrained model differs, a copy does not.

    Contents, not modification times: a retrain within the same second, or a tool that keeps
    times, cannot pass for the old model, and a copy to another node's scratch still resumes.
    Reading the weights once costs about what loading them does.
    """
    h = hashlib.sha256()
    folder = Path(model_dir)
    for p in sorted(folder.rglob("*")) if folder.is_dir() else ():
        if p.is_file():
            h.update(f"{p.relative_to(folder)}\0{p.stat().st_size}\0".encode())
            with open(p, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
    return h.hexdigest()


def resume_inputs(model_dir: str | Path, name: str, corpus_spec: Mapping, head: str,
                  files_sha256: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The upstream part of a corpus encode's resume key: model content, corpus (its spec and, for local
    files, their contents) and head (``encode_docs`` adds the document count, output settings, precision,
    device and batching)."""
    return {"model": model_fingerprint(model_dir), "corpus": name, "spec": dict(corpus_spec),
            "files": dict(files_sha256 or {}), "head": head}


def skip_finished(docs: Iterator[tuple[str, str]], n: int, last_id: str | None, folder: ShardFolder) -> None:
    """Advance ``docs`` past the ``n`` documents of the finished shards, checking the last id."""
    seen = None
    for seen, _ in itertools.islice(docs, n):
        pass
    if n and seen != last_id:
        shutil.rmtree(folder.root, ignore_errors=True)
        raise ValueError(f"{folder.root}: its finished shards end at document {last_id!r}, but the corpus has "
                         f"{seen!r} there; the corpus changed since: its work folder is removed, rerun to encode "
                         "it from the start")


def encoder_numerics(encoder: Encoder) -> dict[str, Any]:
    """What the encoder's numbers depend on besides the model: effective precision and device.

    ``precision``: ``bf16`` under bf16 autocast, else ``fp32``; ``device``: ``cpu`` or ``cuda``
    with the GPU's name; ``cpu_threads``: on CPU, the threads (they set the float sums' order).
    None for an encoder that is not the project's (a test's stub).
    """
    import torch

    bf16 = bf16_autocast(encoder)
    if bf16 is None:
        return {"precision": None, "device": None, "cpu_threads": None}
    device = encoder.device
    name = f"cuda {torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type
    return {"precision": "bf16" if bf16 else "fp32", "device": name,
            "cpu_threads": torch.get_num_threads() if device.type == "cpu" else None}


class ShardFolder:
    """The work folder of one corpus encode: ``shards/`` (becomes the output), ``records/`` and
    ``state.json`` (the inputs the shards were made under, and the size guard's sample)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shards = root / "shards"
        self.records = root / "records"
        self.state = root / "state.json"
        self._state: dict[str, Any] = {}

    def start(self, inputs: dict[str, Any], shard_docs: int, total: int | None = None) -> list[ShardRecord]:
        """Finished shards of an earlier run under the same ``inputs`` (verified), else a clean folder.

        ``inputs`` names everything the shards depend on (model, corpus, output settings, precision,
        device, batching); other inputs start the work again, with one line naming what differs.
        Anything else found in the folder (a shard without a valid record, a half-written file) is deleted.
        """
        inputs = json.loads(json.dumps(inputs))  # as state.json reads back
        earlier = self._read_state()
        finished: list[ShardRecord] = []
        if earlier is not None and earlier.get("inputs") == inputs:
            finished = self._verified(shard_docs, total)
        elif earlier is not None:
            log.info("%s: %s: starting again", self.root, _differences(earlier.get("inputs"), inputs))
        self._state = {"inputs": inputs}
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
        from splade_rescale.atomic import replace_dir

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
