"""Declared reuse: a corpus takes the vectors of the documents another corpus of the experiment holds too.

BEIR's FEVER and Climate-FEVER are built from the same Wikipedia abstracts; a dataset may say so in the config
(``vectors_from: <dataset>``, config/README.md). A document is the same in two corpora when its id AND its text
are: rule corpus_digests records a 16-byte BLAKE2b digest of ``id + "\\0" + text`` per document, in corpus order.
The declaring corpus's encode waits, in the DAG, for the source's collection of the same model, copies the line
of each document whose digest the source holds and encodes the rest. A document's vector is a function of the
document alone, so the collection holds a plain encode's lines in its shards, and its statistics (gzip's bytes
may differ: ISA-L's output depends on how its input is fed).

Memory stays bounded: the source's shards are read once and each wanted line is spilled to the file of its
destination's window (``SPILL_DOCS`` positions) in the work folder ``.{corpus}.reuse/``; the merge holds one
window. A killed job keeps a finished spill and the encode of the rest (itself resumable); the folder goes once
the collection is written.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import shutil
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, NamedTuple

import numpy as np
from tqdm import tqdm

from splade_rescale.atomic import atomic_dir, write_json
from splade_rescale.digests import doc_digest, read_digests
from splade_rescale.encoding.vector_lines import TermStats, gzip_compressor

log = logging.getLogger(__name__)

KEY = "vectors_from"
LITTLE = 0.10  # a declaration that reuses a smaller share of its corpus's documents saves little
SPILL_DOCS = 50_000  # destination positions a spill file holds: the merge's memory, in lines
SETTINGS = ("gzip", "precision", "device", "quantization", "max_length", "max_active_dims")  # of both collections
STALE_DIGEST = ("document {docid!r}: its digest is not that of its text (the corpus changed since its digests "
                "were written); fix: rerun rule corpus_digests, then this encode")

# The documents the source lacks -> their collection in a folder (a resumable encode); its statistics.
# Arguments: the documents, the folder, their count, a tag of what was reused (part of the encode's resume key).
OwnEncode = Callable[[Iterator[tuple[str, str]], Path, int, str], dict[str, Any]]


class Reuse(NamedTuple):
    """A declared corpus's inputs: its digests, the source's collection (same model) and the source's digests."""

    digests: Path
    source: Path
    source_digests: Path


class Plan(NamedTuple):
    """A range of a corpus: its documents' digests and each one's line in the source (-1: encoded here)."""

    digests: np.ndarray
    lines: np.ndarray


def declared_sources(datasets: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Corpus -> the corpus it takes its vectors from, by the datasets' ``vectors_from``; ConfigError on a bad one."""
    from splade_rescale.data.corpora import corpora
    from splade_rescale.errors import ConfigError

    of_dataset, _ = corpora(datasets)
    out: dict[str, str] = {}
    for name, spec in datasets.items():
        if (source := spec.get(KEY)) is None:
            continue
        where = f"datasets.{name}.{KEY} = {source!r}"
        if source not in datasets:
            others = ", ".join(sorted(set(datasets) - {name}))
            raise ConfigError(f"{where} is not a dataset; fix: name one of: {others}")
        corpus, src = of_dataset[name], of_dataset[source]
        if corpus == src:
            raise ConfigError(f"{where} is this dataset, or one over its own corpus ({corpus}); fix: remove the key")
        if datasets[source].get(KEY) is not None:
            raise ConfigError(f"{where} takes its own vectors from {datasets[source][KEY]!r}; fix: name the dataset "
                              f"that holds the vectors (a chain or cycle of {KEY} is not followed)")
        if out.setdefault(corpus, src) != src:
            raise ConfigError(f"{where}: another dataset over corpus {corpus} takes its vectors from corpus "
                              f"{out[corpus]}; fix: give the datasets of one corpus one source")
    for corpus, src in out.items():
        if src in out:
            raise ConfigError(f"datasets: corpus {corpus} takes its vectors ({KEY}) from {src}, which takes its own "
                              f"from {out[src]}; fix: name the dataset that holds the vectors")
    return out


def source_lines(own: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Each of ``own``'s digests' first position in ``source`` (its line in the source's collection); -1: absent."""
    out = np.full(len(own), -1, dtype=np.int64)
    if not len(source):
        return out
    src, mine = (np.frombuffer(d.tobytes(), dtype="<u8").reshape(-1, 2) for d in (source, own))
    order = np.argsort(src[:, 0], kind="stable")  # 8-byte prefixes sort fast; whole digests checked below
    first = src[order, 0]
    at = np.minimum(np.searchsorted(first, mine[:, 0]), len(first) - 1)
    prefix = first[at] == mine[:, 0]
    hit = prefix & (src[order[at], 1] == mine[:, 1])
    out[hit] = order[at[hit]]
    for i in np.flatnonzero(prefix & ~hit).tolist():  # another digest with the same prefix first: look on
        k = int(at[i]) + 1
        while k < len(first) and first[k] == mine[i, 0]:
            if src[order[k], 1] == mine[i, 1]:
                out[i] = order[k]
                break
            k += 1
    return out


def write_overlap(name: str, digests: Path, source: str, source_digests: Path, out: Path) -> dict[str, Any]:
    """CLI stage: how many of a declaring corpus's documents its source holds; a warning when that saves little."""
    own = read_digests(digests)
    reused = int((source_lines(own, read_digests(source_digests)) >= 0).sum())
    share = reused / len(own) if len(own) else 0.0
    record = {"corpus": name, KEY: source, "docs": len(own), "reused_docs": reused, "share": round(share, 6)}
    log.info("corpus %s: %d of its %d documents (%.1f%%) are in %s: their vectors are copied, not encoded", name,
             reused, len(own), 100 * share, source)
    if share < LITTLE:
        record["warning"] = (f"{name} reuses {100 * share:.1f}% of its documents from {source}: the declaration "
                             f"saves little and makes its encode wait for {source}'s; fix: remove its {KEY}")
        log.warning("%s", record["warning"])
    write_json(out, record)
    return record


def plan_reuse(reuse: Reuse, start: int, stop: int | None) -> Plan | None:
    """Documents ``[start, stop)``'s (None: to the end) digests and lines in the source; None when the source holds
    none of them or left no vectors (a SKIPPED record: a collapsed model, a corpus too dense)."""
    from splade_rescale.encoding.skips import skipped

    if skipped(reuse.source):
        log.info("%s holds no vectors (%s): every document is encoded", reuse.source, skipped(reuse.source)["status"])
        return None
    own, source = read_digests(reuse.digests), read_digests(reuse.source_digests)
    held = json.loads(_stats_path(reuse.source).read_text())["n_docs"]
    stop = len(own) if stop is None else stop
    for path, n, docs in ((reuse.digests, len(own), stop), (reuse.source_digests, len(source), held)):
        if n < docs or (path == reuse.source_digests and n != docs):
            raise ValueError(f"{path}: {n:,} digests for {docs:,} documents; fix: rerun rule corpus_digests")
    plan = Plan(own[start:stop], source_lines(own[start:stop], source))
    log.info("documents %d-%d: %d of %d copied from %s", start, stop, int((plan.lines >= 0).sum()), stop - start,
             reuse.source)
    return plan if (plan.lines >= 0).any() else None


def encode_reusing(reuse: Reuse, plan: Plan, docs: Iterable[tuple[str, str]], out_dir: Path, encode: OwnEncode,
                   key: Mapping[str, Any], shard_docs: int) -> dict[str, Any]:
    """A range of documents (``docs``, in step with ``plan``) -> its collection in ``out_dir`` and statistics, as a
    plain encode with ``shard_docs`` a shard writes them: lines copied from the source, the rest ``encode``d.
    ``key``: what the vectors depend on (model, lengths, precision...): a change starts the work folder again."""
    t0 = time.perf_counter()
    work = out_dir.with_name(f".{out_dir.name}.reuse")
    # the documents encoded here are keyed by themselves, the copied lines by the source's encode too
    tag = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode() + plan.digests.tobytes()
                         + np.packbits(plan.lines < 0).tobytes()).hexdigest()
    copied = hashlib.sha256(tag.encode() + _stats_path(reuse.source).read_bytes()).hexdigest()
    own_n = int((plan.lines < 0).sum())
    try:
        _spill(reuse.source, plan.lines, work / "spill", copied)
        done = work / "own.json"
        own: dict[str, Any] = {}
        if own_n and done.is_file() and (kept := json.loads(done.read_text()))["tag"] == tag:
            own = kept["stats"]
            log.info("%s: the %d documents the source lacks were encoded by an earlier run: kept", work, own_n)
        elif own_n:
            own = encode(_checked(docs, plan), work / "own", own_n, tag)
            write_json(done, {"tag": tag, "stats": own})
        with atomic_dir(out_dir) as tmp:
            stats, shards = _merge(plan.lines, work / "spill", work / "own" if own_n else None, tmp, shard_docs)
            shard_bytes = sum(p.stat().st_size for p in tmp.iterdir())
    except BaseException as exc:
        from splade_rescale.encoding.size_guard import TooDenseError

        if isinstance(exc, TooDenseError):  # the record is final: nothing to resume
            shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work)
    n, secs = stats.n, time.perf_counter() - t0
    source = json.loads(_stats_path(reuse.source).read_text())
    return {"size_estimate": None, **{k: source.get(k) for k in SETTINGS}, **own, **stats.as_dict("docs", "doc"),
            "seconds": round(secs, 3), "reused_docs": n - own_n,
            "encoded_docs": own.get("encoded_docs", 0), "resumed_docs": own.get("resumed_docs", 0),
            "docs_per_second": round(own["encoded_docs"] / secs, 2) if own.get("encoded_docs") else None,
            "shards": shards, "shard_docs": shard_docs, "shard_bytes": shard_bytes,
            "shard_bytes_per_doc": round(shard_bytes / n, 1)}


def _stats_path(collection: Path) -> Path:
    return collection.with_name(collection.name + ".stats.json")


def _lines(collection: Path) -> Iterator[bytes]:
    """A collection's lines, in order."""
    for shard in sorted(collection.glob("docs-*.jsonl.gz")):
        with gzip.open(shard, "rb") as f:
            yield from f


def _spill(source: Path, lines: np.ndarray, folder: Path, tag: str) -> None:
    """The source's wanted lines, each to its destination window's file as (position, length, line): one pass
    over the source's shards, ended after the last wanted line. Kept when a killed run finished it."""
    done = folder / "done"
    if done.is_file() and done.read_text() == tag:
        return log.info("%s: the source's lines were copied by an earlier run: kept", folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    to = np.flatnonzero(lines >= 0)
    to = to[np.argsort(lines[to], kind="stable")]  # destinations by their line in the source
    wanted, k = lines[to].tolist(), 0
    with ExitStack() as stack:
        files: dict[int, BinaryIO] = {}
        for j, line in enumerate(tqdm(_lines(source), desc="copy vectors", unit="doc", mininterval=5)):
            while k < len(wanted) and wanted[k] == j:
                p = int(to[k])
                if (w := p // SPILL_DOCS) not in files:
                    files[w] = stack.enter_context(open(folder / f"{w:05d}.bin", "wb"))
                files[w].write(p.to_bytes(8, "little") + len(line).to_bytes(4, "little") + line)
                k += 1
            if k == len(wanted):
                break
    if k < len(wanted):
        raise ValueError(f"{source}: holds fewer documents than its digests say; fix: encode it again "
                         "(snakemake --forcerun on its encode), then this one")
    done.write_text(tag)


def _window(path: Path) -> dict[int, bytes]:
    """A spill file's lines by destination position."""
    out, data, at = {}, path.read_bytes() if path.is_file() else b"", 0
    while at < len(data):
        p, n = int.from_bytes(data[at:at + 8], "little"), int.from_bytes(data[at + 8:at + 12], "little")
        out[p], at = data[at + 12:at + 12 + n], at + 12 + n
    return out


def _merge(lines: np.ndarray, spill: Path, own: Path | None, out: Path, shard_docs: int) -> tuple[TermStats, int]:
    """The range's lines in order into shards of ``shard_docs`` (copied from the spill, the rest from ``own``);
    their statistics, read from the lines themselves, and the shard count."""
    rest = _lines(own) if own else iter(())
    stats, buffer, shard, c, k = TermStats(), [], None, None, 0
    try:
        for p in tqdm(range(len(lines)), desc="merge", unit="doc", mininterval=5):
            if p % SPILL_DOCS == 0:
                window = _window(spill / f"{p // SPILL_DOCS:05d}.bin")
                here = lines[p:p + SPILL_DOCS].tolist()  # not the whole range's as Python ints
            j = here[p % SPILL_DOCS]
            if shard is not None and (p % shard_docs == 0 or len(buffer) >= 4096):
                stats.merge(_line_terms(buffer))
                shard.write(c.compress(b"".join(buffer)) + (c.flush() if p % shard_docs == 0 else b""))
                buffer = []
            if p % shard_docs == 0:
                shard and shard.close()
                shard, c, k = open(out / f"docs-{k:05d}.jsonl.gz", "wb"), gzip_compressor(), k + 1
            buffer.append(window.pop(p) if j >= 0 else next(rest))
        if shard is not None:
            stats.merge(_line_terms(buffer))
            shard.write(c.compress(b"".join(buffer)) + c.flush())
    finally:
        if shard is not None:
            shard.close()
    if next(rest, None) is not None:
        raise ValueError(f"{own}: more lines than the documents the source lacks; fix: rerun this encode")
    return stats, k


def _line_terms(lines: list[bytes]) -> TermStats:
    """Documents, non-zeros, empty vectors and document frequencies of vector lines."""
    stats, ids = TermStats(), []
    for line in lines:
        vector = json.loads(line)["vector"]
        ids.append(np.fromiter(vector, dtype=np.int64, count=len(vector)))
        stats.n_empty += not vector
    stats.n = len(lines)
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    stats.nnz, stats.df = len(flat), np.bincount(flat)
    return stats


def _checked(docs: Iterable[tuple[str, str]], plan: Plan) -> Iterator[tuple[str, str]]:
    """The documents the source lacks; every document's digest checked against its text, since a copied vector
    is found by its digest alone. The last is given once the range is read to its end, so all are checked."""
    held = None
    for (docid, text), line, digest in zip(docs, plan.lines.tolist(), plan.digests.tolist()):
        if doc_digest(docid, text) != digest:
            raise ValueError(STALE_DIGEST.format(docid=docid))
        if line < 0:
            if held is not None:
                yield held
            held = docid, text
    if held is not None:
        yield held
