"""Vector lines: JSON lines of quantised rows, gzip streams, and the term statistics of encoded rows.

Lines are byte for byte what ``json.dumps`` writes for ``{"id", "contents", "vector"}``
(keys and separators as today), built from per-term and per-weight lookup tables instead of a
Python dict per document. Compression is gzip from ISA-L (``isal``) at level 1: the same gzip
format Anserini reads, several times faster than zlib at level 6 and smaller than zlib at level 1
(measurements: docs/measurements.md). The same bytes need the same compressor, so the compressor
is part of the vector key (a machine without ``isal`` writes zlib's bytes).
"""

from __future__ import annotations

import json
import operator
from typing import Sequence

import numpy as np

try:  # ISA-L's deflate; plain zlib where the package is missing (the device image, say)
    from isal import isal_zlib as _deflate

    COMPRESSOR = "isal"
except ImportError:  # pragma: no cover - isal is a dependency of the package
    import zlib as _deflate

    COMPRESSOR = "zlib"

from splade_rescale.model.sparse_rows import SparseRows

Batches = Sequence[tuple[np.ndarray, SparseRows]]  # (positions in the chunk, their rows) per encoded batch


GZIP_LEVEL = 1  # ISA-L levels are 0-3; see the module docstring
GZIP_FEED = 1 << 20  # bytes handed to the compressor at a time


class GzipStream:
    """A gzip stream whose bytes depend on its content alone: the compressor's output depends on how its
    input is cut (ISA-L's does), so it is fed blocks of :data:`GZIP_FEED` bytes whatever the callers'
    pieces (which follow the batching). Header mtime 0: a rerun writes identical bytes."""

    def __init__(self) -> None:
        self._deflate = _deflate.compressobj(GZIP_LEVEL, _deflate.DEFLATED, 16 + 15)
        self._pending = bytearray()

    def compress(self, data: bytes) -> bytes:
        self._pending += data
        out, fed = [], 0
        while len(self._pending) - fed >= GZIP_FEED:
            out.append(self._deflate.compress(bytes(self._pending[fed:fed + GZIP_FEED])))
            fed += GZIP_FEED
        del self._pending[:fed]
        return b"".join(out)

    def flush(self) -> bytes:
        out = self._deflate.compress(bytes(self._pending)) + self._deflate.flush()
        self._pending.clear()
        return out


def gzip_compressor() -> GzipStream:
    return GzipStream()


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
