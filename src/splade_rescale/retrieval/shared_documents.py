"""Documents shared by corpora: a model encodes a document once, whichever corpora hold it.

BEIR's FEVER and Climate-FEVER are built from the same Wikipedia abstracts. A document is the same in
two corpora when its id AND its text are: each prepared corpus records a 16-byte BLAKE2b digest of
``id + "\\0" + text`` per document, in corpus order (:func:`write_corpus_digests`, rule ``corpus_digests``).

An encode job compares its corpus's digests with those of the model's other corpora present on disk
(:func:`shared_mask`; a corpus whose digests are not written yet is not shared with, logged). The
vectors of shared documents go to a per-model store (:class:`SharedStore`), keyed by what makes the
vectors (model content, head, lengths, quantization, pruning, precision, device, batching), so a
changed model never reuses them. The store is cut into 256 buckets by the digest's first byte (stable
when corpora are added); a bucket is a set of immutable pieces, each published atomically (written
beside, then renamed), so concurrent jobs of one model are correct and at worst encode a document
twice. Jobs walk the buckets in opposite directions when others are running (markers in ``running/``),
which makes that rare. A job reads one bucket at a time, so memory stays bounded whatever the corpus.

A piece file: an 8-byte little-endian count ``n``, ``n`` digests, the byte length of the next member, the
gzip of ``n`` lines as a shard holds them (``{"id", "contents", "vector"}``), then the gzip of each line's
term count and term ids (int32, each row's as differences): a corpus's statistics without parsing its lines.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from splade_rescale.atomic import atomic_file, write_json
from splade_rescale.retrieval.shard_folder import TermStats, gzip_compressor

log = logging.getLogger(__name__)

DIGEST_BYTES = 16
DIGEST = f"V{DIGEST_BYTES}"  # numpy dtype of a digest array: raw bytes, sortable (not "S": it strips trailing NULs)

STALE_DIGEST = ("document {docid!r}: its digest is not that of its text (the corpus changed since its digests "
                "were written); fix: rerun rule corpus_digests, then this encode")
# A bucket's missing documents, (id, text) pairs, encoded on the device -> what ``ToLines`` formats on the host.
Encode = Callable[[Sequence[tuple[str, str]]], Any]
# Those documents and their encoding -> their shard lines and term ids, in order (on the publishing thread).
ToLines = Callable[[Sequence[tuple[str, str]], Any], tuple[list[bytes], list[np.ndarray]]]


def doc_digest(docid: str, text: str) -> bytes:
    return hashlib.blake2b(f"{docid}\0{text}".encode(), digest_size=DIGEST_BYTES).digest()


def digests_path(prepared: str | Path) -> Path:
    """Where a corpus's digests lie: beside its preparation record (``{corpus}.json`` -> ``{corpus}.digests``)."""
    return Path(prepared).with_suffix(".digests")


def write_corpus_digests(name: str, spec: Mapping[str, Any], out: str | Path, root: str | Path = ".") -> int:
    """CLI stage: one digest per document of a corpus, in its order, to ``out`` (atomically); the count."""
    from splade_rescale.data.datasets import load_corpus

    docs, total = load_corpus(name, spec, root, count=False)
    n = 0
    with atomic_file(out) as tmp, open(tmp, "wb") as f:
        for docid, text in tqdm(docs, total=total, desc=f"digests {name}", unit="doc", mininterval=5):
            f.write(doc_digest(docid, text))
            n += 1
    log.info("corpus %s: %d document digests", name, n)
    return n


def fresh_digests(prepared: str | Path) -> Path | None:
    """A corpus's digests file, unless it is older than its preparation record (the corpus was prepared again
    and rule corpus_digests has not run since): then None, and the encode shares nothing."""
    path, prepared = digests_path(prepared), Path(prepared)
    if path.is_file() and prepared.is_file() and path.stat().st_mtime < prepared.stat().st_mtime:
        log.info("%s: older than %s: not used until rule corpus_digests writes it again", path, prepared)
        return None
    return path


def may_share(stats: Path) -> bool:
    """Whether a corpus of the model can still share vectors (``stats``: its encode's statistics): it is yet
    to be encoded, or its encode went through the store. One encoded without it left no vector to reuse,
    and will not read any: documents shared with it alone are encoded as the corpus's own."""
    if not stats.is_file():
        return True
    try:
        return "shared_docs" in json.loads(stats.read_text())
    except (OSError, ValueError):
        return True


def read_digests(path: str | Path) -> np.ndarray:
    return np.fromfile(path, dtype=DIGEST)


def shared_mask(name: str, digests: np.ndarray, others: Mapping[str, Path]) -> np.ndarray:
    """Which of a corpus's documents (its ``digests``) another corpus holds too; ``others``: name -> digests file."""
    mask = np.zeros(len(digests), dtype=bool)
    head = first_words(digests)
    for other, path in others.items():
        if other == name:
            continue
        if not Path(path).is_file():
            log.info("corpus %s: no digests yet (%s): not shared with", other, path)
            continue
        found = np.isin(head, first_words(read_digests(path)))
        log.info("corpus %s: %d of its %d documents are also in %s", name, int(found.sum()), len(digests), other)
        mask |= found
    return mask


def first_words(digests: np.ndarray) -> np.ndarray:
    """Each digest's first 8 bytes as an integer: numpy sorts these many times faster than 16-byte keys. A rare
    equal prefix only sends a document through the store, which matches whole digests: never a wrong vector."""
    return np.frombuffer(digests.tobytes(), dtype="<u8")[::2]


def store_root(out_dir: str | Path) -> Path:
    """A model's store, ``encoded/{backbone}/{run}/shared``, for an encode output under ``.../corpora/``."""
    out_dir = Path(out_dir).absolute()
    corpora = next((p for p in out_dir.parents if p.name == "corpora"), out_dir.parent)
    return corpora.parent / "shared"


class SharedStore:
    """The shared documents' vectors of one model under one key (a folder of its hash below ``root``)."""

    def __init__(self, root: str | Path, key: Mapping[str, Any]) -> None:
        text = json.dumps(key, sort_keys=True, default=str)
        self.root = Path(root) / hashlib.sha256(text.encode()).hexdigest()[:16]
        self.root.mkdir(parents=True, exist_ok=True)
        if not (self.root / "key.json").is_file():
            write_json(self.root / "key.json", json.loads(text))

    def pieces(self, bucket: int) -> list[Path]:
        return sorted((self.root / f"{bucket:02x}").glob("*.piece"))

    def digests(self, bucket: int) -> np.ndarray:
        """Every digest the bucket's published pieces hold (their headers only)."""
        parts = [_header(p) for p in self.pieces(bucket)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=DIGEST)

    def lines(self, bucket: int, wanted: np.ndarray) -> dict[bytes, tuple[bytes, np.ndarray]]:
        """The published line and term ids of ``wanted`` digests in one bucket (the first piece that holds each)."""
        out: dict[bytes, tuple[bytes, np.ndarray]] = {}
        for path in self.pieces(bucket):
            digests = _header(path)
            if not np.isin(digests, wanted).any():
                continue
            body, counts, ids = _members(path)
            for d, line, row in zip(digests.tolist(), gzip.decompress(body).splitlines(keepends=True),
                                    np.split(ids, np.cumsum(counts)[:-1])):
                out.setdefault(d, (line, row))
        return out

    def whole_pieces(self, bucket: int, wanted: np.ndarray) -> list[Path] | None:
        """The bucket's pieces that hold exactly ``wanted``, in its order (a bucket one job filled, read by it or
        by a corpus holding the same documents in the same order); None when none do."""
        pieces, at = [], 0
        for path in self.pieces(bucket):
            digests = _header(path)
            if at + len(digests) <= len(wanted) and np.array_equal(digests, wanted[at:at + len(digests)]):
                pieces.append(path)
                at += len(digests)
        return pieces if pieces and at == len(wanted) else None

    def publish(self, bucket: int, digests: Sequence[bytes], lines: Sequence[bytes],
                terms: Sequence[np.ndarray]) -> None:
        """One new piece of a bucket, renamed into place once whole (readers never see half of it)."""
        c, t = gzip_compressor(), gzip_compressor()
        body = c.compress(b"".join(lines)) + c.flush()
        ints = np.concatenate([np.array([len(x) for x in terms], dtype="<i4"),  # each row's ids as differences:
                               *(np.diff(x, prepend=0) for x in terms)]).astype("<i4")  # smaller once gzipped
        final = self.root / f"{bucket:02x}" / f"{uuid.uuid4().hex}.piece"
        with atomic_file(final, fsync=True) as tmp:
            tmp.write_bytes(len(digests).to_bytes(8, "little") + b"".join(digests) + len(body).to_bytes(8, "little")
                            + body + t.compress(ints.tobytes()) + t.flush())

    @contextmanager
    def running(self) -> Iterator[bool]:
        """A marker of this job while it fills the store; True: walk the buckets backwards (others run)."""
        folder = self.root / "running"
        folder.mkdir(exist_ok=True)
        marker = folder / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        others = len(list(folder.iterdir()))
        marker.touch()
        try:
            yield others % 2 == 1
        finally:
            marker.unlink(missing_ok=True)


def _members(path: Path) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A piece's gzip member of lines as it is, each line's term count, and all their term ids."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        f.seek(n * DIGEST_BYTES, os.SEEK_CUR)
        body = f.read(int.from_bytes(f.read(8), "little"))
        ints = np.frombuffer(gzip.decompress(f.read()), dtype="<i4")
    counts, steps = ints[:n], ints[n:].astype(np.int64)
    ids = np.cumsum(steps)  # each row's ids are differences from 0: take off the sum before its first
    starts = np.cumsum(counts) - counts
    before = np.where(starts > 0, ids[np.maximum(starts - 1, 0)] if len(ids) else 0, 0)
    return body, counts, ids - np.repeat(before, counts)


def _header(path: Path) -> np.ndarray:
    """A piece's digests."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return np.frombuffer(f.read(n * DIGEST_BYTES), dtype=DIGEST)


def fill_store(store: SharedStore, docs: Iterable[tuple[str, str]], digests: np.ndarray, mask: np.ndarray,
               scratch: Path, encode: Encode, to_lines: ToLines) -> dict[str, int]:
    """Publish the vectors of the shared documents (``mask``) the store lacks; ``docs`` and ``digests`` in step.

    One pass writes the missing documents' texts to a scratch file per bucket; each bucket is then
    encoded on its own (after a fresh look at what other jobs published meanwhile). A thread formats and
    publishes bucket k while the device encodes bucket k + 1, as a corpus's writer thread does, so the device
    does not wait on gzip; at most two buckets' documents are in memory. Returns the shared documents found
    published and encoded here.
    """
    buckets = np.frombuffer(digests.tobytes(), dtype=np.uint8)[::DIGEST_BYTES]
    known = {b: store.digests(b) for b in np.unique(buckets[mask]).tolist()}
    missing = mask.copy()
    for b, have in known.items():
        where = np.flatnonzero(mask & (buckets == b))
        missing[where[np.isin(digests[where], have)]] = False
    if scratch.exists():
        shutil.rmtree(scratch)
    todo = sorted(set(buckets[missing].tolist()))
    if not todo:  # every one published: no pass over the texts (the digests are fresher than the corpus)
        return {"shared_docs": int(mask.sum()), "shared_encoded_docs": 0, "shared_reused_docs": int(mask.sum())}
    scratch.mkdir(parents=True)
    with ExitStack() as stack:
        files = {b: stack.enter_context(open(scratch / f"{b:02x}.jsonl", "w", encoding="utf-8")) for b in todo}
        for i, (docid, text) in enumerate(tqdm(docs, total=len(mask), desc="shared documents", unit="doc",
                                               mininterval=5)):
            if mask[i] and doc_digest(docid, text) != digests[i].tobytes():  # a vector is found by its digest
                raise ValueError(STALE_DIGEST.format(docid=docid))
            if missing[i]:
                files[int(buckets[i])].write(json.dumps([digests[i].tobytes().hex(), docid, text]) + "\n")

    def publish(bucket: int, rows: list[list[str]], encoding: Any) -> None:
        texts = [(r[1], r[2]) for r in rows]
        store.publish(bucket, [bytes.fromhex(r[0]) for r in rows], *to_lines(texts, encoding))

    encoded, pending = 0, None
    with (store.running() as backwards, _removed(scratch),
          ThreadPoolExecutor(1, thread_name_prefix="publish") as publisher):
        for b in tqdm(todo[::-1] if backwards else todo, desc="shared buckets", unit="bucket", mininterval=5):
            rows = [json.loads(line) for line in (scratch / f"{b:02x}.jsonl").read_text(encoding="utf-8").splitlines()]
            have = set(store.digests(b).tolist())  # published by another job since the pass
            rows = [r for r in rows if bytes.fromhex(r[0]) not in have]
            if rows:
                encoding = encode([(r[1], r[2]) for r in rows])
                if pending is not None:
                    pending.result()  # the previous bucket's publishing: its error raised here
                pending = publisher.submit(publish, b, rows, encoding)
            encoded += len(rows)
        if pending is not None:
            pending.result()
    return {"shared_docs": int(mask.sum()), "shared_encoded_docs": encoded,
            "shared_reused_docs": int(mask.sum()) - encoded}


@contextmanager
def _removed(folder: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_shared_shards(store: SharedStore, digests: np.ndarray, mask: np.ndarray, out_dir: Path, first_shard: int,
                        shard_docs: int) -> TermStats:
    """This corpus's shared documents, bucket by bucket from the store, as shards ``first_shard``, ... of
    ``shard_docs`` documents in ``out_dir``; their statistics (from the term ids the pieces keep).

    A bucket whose pieces hold exactly its documents, in order (the common case), is copied as their gzip
    members, neither decompressed nor compressed again (a shard may then hold up to a bucket more than
    ``shard_docs``); any other bucket line by line."""
    buckets = np.frombuffer(digests.tobytes(), dtype=np.uint8)[::DIGEST_BYTES]
    stats, k, n_open, out, c = TermStats(), first_shard, 0, None, None

    def end_member() -> None:  # of the lines written one by one
        nonlocal c
        if c is not None:
            out.write(c.flush())
            c = None

    def close_shard() -> None:
        nonlocal out, k, n_open
        end_member()
        out.close()
        out, k, n_open = None, k + 1, 0

    try:
        for b in tqdm(np.unique(buckets[mask]).tolist(), desc="shared shards", unit="bucket", mininterval=5):
            wanted = digests[np.flatnonzero(mask & (buckets == b))]
            terms: list[np.ndarray] = []
            if (pieces := store.whole_pieces(b, wanted)) is not None:
                out = out or open(out_dir / f"docs-{k:05d}.jsonl.gz", "wb")
                end_member()
                for path in pieces:
                    body, counts, ids = _members(path)
                    out.write(body)
                    terms.append(ids)
                    stats.n_empty += int((counts == 0).sum())
                stats.n += len(wanted)
                n_open += len(wanted)
                if n_open >= shard_docs:
                    close_shard()
            else:
                lines = store.lines(b, wanted)
                for d in wanted.tolist():
                    if d not in lines:
                        raise RuntimeError(f"{store.root}: the vector of a shared document (digest {d.hex()}) is "
                                           "missing from the store; rerun the encode")
                    out = out or open(out_dir / f"docs-{k:05d}.jsonl.gz", "wb")
                    c = c or gzip_compressor()
                    line, doc_terms = lines[d]
                    out.write(c.compress(line))
                    terms.append(doc_terms)
                    stats.n += 1
                    stats.n_empty += not len(doc_terms)
                    n_open += 1
                    if n_open >= shard_docs:
                        close_shard()
            bucket_df = TermStats()
            flat = np.concatenate(terms).astype(np.int64) if terms else np.zeros(0, dtype=np.int64)
            bucket_df.nnz, bucket_df.df = len(flat), np.bincount(flat)
            stats.merge(bucket_df)
        if out is not None:
            close_shard()
    finally:
        if out is not None:
            out.close()
    return stats
