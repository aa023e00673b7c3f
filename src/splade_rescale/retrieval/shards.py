"""JsonVectorCollection shards: fast JSON lines, a background writer, and finished-shard records.

Lines are byte for byte what ``json.dumps`` writes for ``{"id", "contents", "vector"}``
(keys and separators as today), built from per-term and per-weight lookup tables instead of a
Python dict per document. Compression is gzip from ISA-L (``isal``) at level 1: the same gzip
format Anserini reads, several times faster than zlib at level 6 and smaller than zlib at level 1
(measurements: docs/measurements.md). The same bytes need the same compressor, so the compressor
is one of the inputs a resume must match (a machine without ``isal`` writes zlib's bytes).

A shard is final once written: its file is renamed into place and a record beside the work
folder gives its document count, first and last id, size, SHA-256, non-zero count and per-term
document frequencies. Shard, frequencies and record are synced to disk in that order, so a
record survives a node crash only with its shard. A rerun verifies the records
(:mod:`splade_rescale.retrieval.resume`) and encodes only the rest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
import os
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

try:  # ISA-L's deflate; plain zlib where the package is missing (the device image, say)
    from isal import isal_zlib as _deflate

    COMPRESSOR = "isal"
except ImportError:  # pragma: no cover - isal is a dependency of the package
    import zlib as _deflate

    COMPRESSOR = "zlib"

from splade_rescale.atomic import atomic_file, fsync_path, write_json
from splade_rescale.retrieval.sparse_rows import SparseRows

if TYPE_CHECKING:
    from splade_rescale.retrieval.resume import ShardFolder

log = logging.getLogger(__name__)

Batches = Sequence[tuple[np.ndarray, SparseRows]]  # (positions in the chunk, their rows) per encoded batch

GZIP_LEVEL = 1  # ISA-L levels are 0-3; see the module docstring
MIN_SHARD_DOCS = 1000  # smaller shards would only add files: one Lucene thread indexes ~1,000 docs in seconds


def gzip_compressor() -> Any:
    """A gzip stream (header mtime 0: a rerun writes identical bytes)."""
    return _deflate.compressobj(GZIP_LEVEL, _deflate.DEFLATED, 16 + 15)


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


class VectorLines:
    """JSON lines of :class:`SparseRows`, identical to ``json.dumps`` of the same dicts."""

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._weights: list[bytes] = []  # b"7, " for w < n, then b"7" (last of a row) at w + n
        self._n_weights = 0

    def _grow(self, max_term: int, max_weight: int) -> None:
        if max_term >= len(self._keys):
            self._keys += [b'"%d": ' % t for t in range(len(self._keys), max(max_term + 1, 2 * len(self._keys)))]
        if max_weight >= self._n_weights:
            n = max(max_weight + 1, 2 * self._n_weights, 1024)
            self._weights = [b"%d, " % w for w in range(n)] + [b"%d" % w for w in range(n)]
            self._n_weights = n

    def rows(self, prefixes: Sequence[bytes], rows: SparseRows) -> list[bytes]:
        """One line per row: ``prefix + vector + "}\n"``; a prefix ends with ``"vector": {``."""
        nnz = int(rows.indptr[-1])
        if not nnz:
            return [p + b"}}\n" for p in prefixes]
        self._grow(int(rows.terms.max()), int(rows.weights.max()))
        code = rows.weights.astype(np.int64)
        ends = rows.indptr[1:][np.diff(rows.indptr) > 0] - 1
        code[ends] += self._n_weights  # a row's last weight has no ", " after it
        flat: list[bytes] = [b""] * (2 * nnz)
        flat[0::2] = _pick(self._keys, rows.terms.tolist())
        flat[1::2] = _pick(self._weights, code.tolist())
        ip = (2 * rows.indptr).tolist()
        join = b"".join
        return [join((prefix, join(flat[ip[i]:ip[i + 1]]), b"}}\n")) for i, prefix in enumerate(prefixes)]

    def ordered(self, prefixes: Sequence[bytes], batches: Sequence[tuple[np.ndarray, SparseRows]]) -> bytes:
        """Lines of rows encoded in batches out of order (``(positions, rows)``), in position order."""
        lines: list[bytes] = [b""] * len(prefixes)
        for positions, rows in batches:
            for i, line in zip(positions.tolist(), self.rows([prefixes[i] for i in positions], rows)):
                lines[i] = line
        return b"".join(lines)


def _pick(table: list[bytes], idx: list[int]) -> Sequence[bytes]:
    return operator.itemgetter(*idx)(table) if len(idx) > 1 else [table[idx[0]]]


def doc_prefix(docid: str) -> bytes:
    return b'{"id": %s, "contents": "", "vector": {' % json.dumps(docid, ensure_ascii=False).encode()


def query_prefix(qid: str) -> bytes:
    return b'{"id": %s, "vector": {' % json.dumps(qid).encode()


class TermStats:
    """Documents, non-zeros, empty vectors and per-term document frequencies of encoded rows."""

    def __init__(self) -> None:
        self.n = self.nnz = self.n_empty = 0
        self.df = np.zeros(0, dtype=np.int64)

    def add(self, rows: SparseRows) -> None:
        lengths = np.diff(rows.indptr)
        self.n += len(lengths)
        self.nnz += int(rows.indptr[-1])
        self.n_empty += int((lengths == 0).sum())
        self._add_df(np.bincount(rows.terms, minlength=len(self.df)))

    def merge(self, other: "TermStats") -> "TermStats":
        self.n += other.n
        self.nnz += other.nnz
        self.n_empty += other.n_empty
        self._add_df(other.df)
        return self

    def _add_df(self, counts: np.ndarray) -> None:
        if len(counts) > len(self.df):
            self.df = np.pad(self.df, (0, len(counts) - len(self.df)))
        self.df[:len(counts)] += counts

    def as_dict(self, kind: str, one: str) -> dict:
        terms = np.flatnonzero(self.df)
        return {f"n_{kind}": self.n, f"mean_nnz_per_{one}": self.nnz / self.n if self.n else 0.0,
                f"n_{kind}_empty_vector": self.n_empty,
                "term_df": dict(zip(map(str, terms.tolist()), self.df[terms].tolist()))}


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


class ShardWriter:
    """Writes chunks of encoded documents, shard by shard, in a background thread.

    Chunks arrive in corpus order and never straddle a shard (the caller cuts them at shard
    boundaries), so shard ``k`` holds documents ``[k * shard_docs, (k + 1) * shard_docs)``.
    ``put`` returns at once (up to ``depth`` chunks wait); errors surface on the next call.
    """

    def __init__(self, folder: ShardFolder, shard_docs: int, first_doc: int, depth: int = 2) -> None:
        self.folder, self.shard_docs = folder, shard_docs
        self._finished = TermStats()  # this run's finished shards
        self.error: BaseException | None = None
        self._pos = first_doc
        self._lines = VectorLines()
        self._shard: _OpenShard | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, name="shard-writer", daemon=True)
        self._thread.start()

    def put(self, docids: list[str], batches: Batches, measure: bool = False) -> None:
        """Queue a chunk (its ids in corpus order, its rows as encoded: ``(positions, rows)`` per batch);
        ``measure``: the chunk is the size guard's sample: save its size as a standalone shard with the
        folder (:meth:`ShardFolder.save_size_sample`) before its shard can finish."""
        self._raise()
        self._queue.put((docids, batches, measure))

    def drain(self) -> None:
        """Wait until every queued chunk is written."""
        self._queue.join()
        self._raise()

    def close(self) -> None:
        """Finish the last shard and stop the thread."""
        self._queue.put(None)
        self._thread.join()
        self._raise()
        if self._shard is not None:
            self._finish_shard()

    def abort(self, write_queued: bool = True) -> None:
        """Stop without finishing the open shard (its partial file is removed).

        ``write_queued``: the chunks already encoded and queued are written first, so a shard
        they complete is kept for the rerun (the caller failed after them, not in them).
        """
        if not write_queued:
            self._drop_queued()
        self._queue.put(None)
        self._thread.join(timeout=600)
        if self._shard is not None:
            self._shard.discard()

    def _drop_queued(self) -> None:
        """Empty the queue unwritten (which also unblocks a producer waiting on it)."""
        while True:
            try:
                self._queue.get_nowait()
                self._queue.task_done()
            except queue.Empty:
                return

    @property
    def stats(self) -> TermStats:
        """Documents written by this run so far (finished shards + the open one)."""
        out = TermStats().merge(self._finished)
        return out.merge(self._shard.stats) if self._shard is not None else out

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                if self.error is None:
                    self._write(*item)
            except BaseException as exc:  # surfaced in the caller's thread
                self.error = exc
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _write(self, docids: list[str], batches: Batches, measure: bool) -> None:
        data = self._lines.ordered([doc_prefix(d) for d in docids], batches)
        if self._shard is None:
            self._shard = _OpenShard(self.folder, self._pos // self.shard_docs, docids[0])
        self._shard.write(data, docids[-1], batches)
        if measure:
            c = gzip_compressor()
            sample = self.stats
            self.folder.save_size_sample(sample.n, len(c.compress(data)) + len(c.flush()), sample.nnz)
        self._pos += len(docids)
        if self._pos % self.shard_docs == 0:
            self._finish_shard()

    def _finish_shard(self) -> None:
        assert self._shard is not None
        self._shard.finish()
        self._finished.merge(self._shard.stats)
        self._shard = None


class _OpenShard:
    def __init__(self, folder: ShardFolder, k: int, first_id: str) -> None:
        self.folder, self.k, self.first_id, self.last_id = folder, k, first_id, first_id
        self.path = folder.shard(k)
        self.tmp = self.path.with_name(self.path.name + ".partial")
        self.fh = open(self.tmp, "wb")
        self.gz = gzip_compressor()
        self.sha = hashlib.sha256()
        self.size = 0
        self.stats = TermStats()

    def _emit(self, data: bytes) -> None:
        self.fh.write(data)
        self.sha.update(data)
        self.size += len(data)

    def write(self, data: bytes, last_id: str, batches: Batches) -> None:
        self._emit(self.gz.compress(data))
        self.last_id = last_id
        for _, rows in batches:
            self.stats.add(rows)

    def finish(self) -> None:
        """Shard, then df file, then record, each durable before the next (the record means 'final')."""
        self._emit(self.gz.flush())
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        with atomic_file(self.folder.df_path(self.k), fsync=True) as tmp, open(tmp, "wb") as f:
            np.save(f, self.stats.df)
        os.replace(self.tmp, self.path)
        fsync_path(self.path.parent)
        record = ShardRecord(self.k, self.stats.n, self.first_id, self.last_id, self.size, self.sha.hexdigest(),
                             self.stats.nnz, self.stats.n_empty)
        write_json(self.folder.record(self.k), record.__dict__, fsync=True)
        log.info("shard %s finished: %d documents", self.path.name, self.stats.n)

    def discard(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)
