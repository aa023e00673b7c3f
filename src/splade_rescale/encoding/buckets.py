"""Length buckets: a text's padded length, and so its batch's shape, is a function of the text alone.

A batch padded to its longest member gives each text a padded length that depends on its batch-mates,
and the backbone's float sums (hence a quantised weight now and then) depend on the padded length.
Here every text is padded to its bucket, its token count rounded up to a multiple of
:data:`BUCKET_STEP`, and a batch holds texts of one bucket only, at most :func:`bucket_rows` of them.
Rows of a batch do not depend on one another (measured on the CPU, tested), so a text's vector is the
same whatever its batch-mates, its position, the corpus order, windows, shards, parts or threads.
On CUDA a short batch is filled to the bucket's row count with copies of its last text (``fill``),
so that every batch of a bucket has one shape, until a GPU run shows that a row's result does not
depend on the batch size.

Texts wait in their bucket until it holds a full batch; a text that has waited ``horizon`` texts
sends its bucket's batch as it is, so memory stays bounded. Buckets of 8 tokens pad little more than
batches sorted by token count (``benchmarks/bench_encode.py --padding``, figures in
benchmarks/results/bench_encode-padding.json).
"""

from __future__ import annotations

from collections import deque
from typing import Iterator, NamedTuple, Sequence

import numpy as np

BUCKET_STEP = 8  # tokens; a multiple of 8 also suits the GPU's matrix tiles


def bucket_length(tokens: int) -> int:
    """The padded length of a text of ``tokens`` tokens: the next multiple of :data:`BUCKET_STEP`."""
    return -(-max(1, tokens) // BUCKET_STEP) * BUCKET_STEP


def bucket_rows(length: int, batch_size: int, batch_tokens: int | None) -> int:
    """Texts in a batch of bucket ``length``: at most ``batch_size``, and ``batch_tokens`` padded tokens
    (None: no token budget) where that is fewer; at least one."""
    return max(1, min(batch_size, (batch_tokens or batch_size * length) // length))


class Batch(NamedTuple):
    """Texts of one bucket: ``positions`` in the stream, their token ``ids``, padded to ``length``
    tokens; the device computes ``rows`` rows (``len(ids)`` where no fill, copies of the last text after)."""

    positions: np.ndarray
    ids: list[Sequence[int]]
    length: int
    rows: int


class BucketBatcher:
    """Texts in (:meth:`add`), batches of one bucket out (:meth:`due`): full ones as they fill, a waiting
    text's bucket after ``horizon`` texts, and every bucket at the end (:meth:`flush`)."""

    def __init__(self, batch_size: int, batch_tokens: int | None = None, fill: bool = False,
                 horizon: int = 100_000) -> None:
        self.batch_size, self.batch_tokens, self.fill, self.horizon = batch_size, batch_tokens, fill, horizon
        self._waiting: dict[int, list[tuple[int, Sequence[int]]]] = {}
        self._due: deque[Batch] = deque()
        self.seen = 0

    def rows(self, length: int) -> int:
        return bucket_rows(length, self.batch_size, self.batch_tokens)

    def halve(self) -> bool:
        """Half the batch (after the device ran out of memory); False when it is one text already."""
        if self.batch_size == 1:
            return False
        self.batch_size //= 2
        self.batch_tokens = self.batch_tokens // 2 if self.batch_tokens else None
        return True

    def add(self, ids: Sequence[Sequence[int]]) -> None:
        """Take the next texts of the stream."""
        first = self.seen
        self.seen += len(ids)
        for k, text in enumerate(ids):
            length = bucket_length(len(text))
            waiting = self._waiting.setdefault(length, [])
            waiting.append((first + k, text))
            if len(waiting) >= self.rows(length):
                self._cut(length)
        for length in [n for n, w in self._waiting.items() if w and self.seen - w[0][0] >= self.horizon]:
            self._cut(length)

    def flush(self) -> None:
        """Every waiting text becomes due, the oldest's bucket first."""
        while waiting := [(w[0][0], n) for n, w in self._waiting.items() if w]:
            self._cut(min(waiting)[1])

    def due(self) -> Iterator[Batch]:
        """The batches due so far, in the order they became due."""
        while self._due:
            yield self._due.popleft()

    def oldest(self) -> int:
        """The stream position of the oldest text not yet handed out in a batch (``seen`` when none)."""
        return min([w[0][0] for w in self._waiting.values() if w] + [int(b.positions.min()) for b in self._due],
                   default=self.seen)

    def split(self, batch: Batch) -> list[Batch]:
        """A batch cut to the current (halved) size."""
        n = self.rows(batch.length)
        return [self._batch(batch.length, list(zip(batch.positions[i:i + n].tolist(), batch.ids[i:i + n])))
                for i in range(0, len(batch.ids), n)]

    def _cut(self, length: int) -> None:
        waiting = self._waiting[length]
        n = self.rows(length)
        self._waiting[length] = waiting[n:]
        self._due.append(self._batch(length, waiting[:n]))

    def _batch(self, length: int, texts: list[tuple[int, Sequence[int]]]) -> Batch:
        rows = self.rows(length) if self.fill else len(texts)
        return Batch(np.array([p for p, _ in texts], dtype=np.int64), [t for _, t in texts], length,
                     max(rows, len(texts)))
