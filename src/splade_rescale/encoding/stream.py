"""Texts in corpus order -> their quantised rows in corpus order, batched by length bucket on the way.

A tokeniser thread tokenises the next chunk while the device encodes; texts wait in their length
bucket (:class:`~splade_rescale.encoding.buckets.BucketBatcher`) until a batch is due; rows come back
out of order and leave in chunks of consecutive texts as soon as every text of the chunk is encoded.
A text's vector depends on the text alone, so how the stream is cut (chunks, parts, a resumed run)
changes no byte. A device out of memory halves the batch and encodes the batches in flight again,
with one log line: the vectors stay the same.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator, NamedTuple, Protocol, Sequence, Sized

import numpy as np
import torch

from splade_rescale.encoding.buckets import Batch, BucketBatcher
from splade_rescale.encoding.vector_lines import Batches
from splade_rescale.model.sparse_rows import NonFiniteWeights, SparseRows

log = logging.getLogger(__name__)

CHUNK_TEXTS = 20_000  # texts tokenised at once, and the least a chunk holds when it leaves (but the last)

def non_finite_error(model_dir: object, exc: NonFiniteWeights, kind: str, owner: str) -> ValueError:
    """The one-line error for a NaN or infinite weight of ``kind`` ``exc.item`` of ``owner``, with the fix."""
    return ValueError(f"{model_dir}: non-finite SPLADE weight ({exc.value}) for {kind} {exc.item!r} of {owner}; fix: "
                      "the model's weights or activations overflowed (see its training log for a divergence); "
                      "retrain it, or encode with encoding.precision: fp32 if only bf16 overflows")


class Encoder(Protocol):
    """Tokenise on the host (any thread); encode batches of one length bucket to host CSR rows."""

    device: torch.device

    def tokenize(self, texts: Sequence[str], max_length: int) -> Sequence[Sized]:
        """Each text's tokens, unpadded (their count picks the bucket)."""

    def encode_sparse(self, batches: Iterable[Batch], quantization: float,
                      max_active_dims: int | None = None) -> Iterator[SparseRows]:
        """Each batch's rows, in order (an encoder may queue the next batch first)."""


class Batching(NamedTuple):
    """Runtime settings of the stream (no output depends on them): at most ``size`` texts and ``tokens``
    padded tokens a batch (None: no token budget), ``chunk`` texts tokenised at once; ``fill``: short
    batches filled to the bucket's row count (None: on CUDA)."""

    size: int = 32
    tokens: int | None = None
    chunk: int = CHUNK_TEXTS
    fill: bool | None = None


def encode_stream(encoder: Encoder, items: Iterable[tuple[str, str]], max_length: int, quantization: float,
                  max_active_dims: int | None = None, batching: Batching = Batching()
                  ) -> Iterator[tuple[list[tuple[str, str]], Batches]]:
    """Consecutive chunks of ``(id, text)`` (at least ``batching.chunk`` but the last) with their batches'
    rows, positions within the chunk. A non-finite weight names its id."""
    on_cuda = getattr(getattr(encoder, "device", None), "type", None) == "cuda"
    fill = on_cuda if batching.fill is None else batching.fill
    batcher = BucketBatcher(batching.size, batching.tokens, fill=fill, horizon=5 * batching.chunk)
    device = _Device(encoder, batcher)
    pending: deque[tuple[str, str]] = deque()  # texts read and not yet sent out; pending[0] is at `sent`
    sent = 0
    done: list[tuple[np.ndarray, SparseRows]] = []  # encoded batches not yet sent out, stream positions

    def due() -> Iterator[Batch]:
        for chunk, tokens in _tokenized(encoder, items, max_length, batching.chunk):
            pending.extend(chunk)
            batcher.add(tokens)
            yield from batcher.due()
        batcher.flush()
        yield from batcher.due()

    try:
        for batch, rows in device.encode(due(), quantization, max_active_dims):
            done.append((batch.positions, rows))
            ready = min(batcher.oldest(), device.oldest())
            if ready - sent >= batching.chunk:
                yield _send(pending, done, sent, ready)
                sent = ready
        if pending:
            yield _send(pending, done, sent, sent + len(pending))
    except NonFiniteWeights as exc:  # exc.row: the text's stream position (_Device.encode)
        raise NonFiniteWeights(exc.row, exc.value, pending[exc.row - sent][0]) from None


def _send(pending: deque[tuple[str, str]], done: list[tuple[np.ndarray, SparseRows]], a: int, b: int
          ) -> tuple[list[tuple[str, str]], Batches]:
    """Texts ``[a, b)`` of the stream, taken from ``pending``, with their rows taken from ``done``."""
    chunk = [pending.popleft() for _ in range(b - a)]
    out, kept = [], []
    for positions, rows in done:
        inside = positions < b
        if inside.all():
            out.append((positions - a, rows))
            continue
        if inside.any():
            out.append((positions[inside] - a, take_rows(rows, np.flatnonzero(inside))))
        kept.append((positions[~inside], take_rows(rows, np.flatnonzero(~inside))))
    done[:] = kept
    return chunk, out


def take_rows(rows: SparseRows, keep: np.ndarray) -> SparseRows:
    """Rows ``keep`` of ``rows``, in that order."""
    lengths = np.diff(rows.indptr)[keep]
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(rows.indptr.dtype)
    take = np.repeat(rows.indptr[keep] - indptr[:-1], lengths) + np.arange(indptr[-1])
    return SparseRows(indptr, rows.terms[take], rows.weights[take])


class _Device:
    """The encoder's batches with out-of-memory recovery: the batch halves, the batches in flight are
    cut to the new size and encoded again (the vectors do not depend on the batch size)."""

    def __init__(self, encoder: Encoder, batcher: BucketBatcher) -> None:
        self.encoder, self.batcher = encoder, batcher
        self.in_flight: deque[Batch] = deque()  # handed to the encoder, rows not yet back
        self.again: deque[Batch] = deque()  # cut after an out-of-memory, to hand to the encoder again

    def oldest(self) -> int:
        """The stream position of the oldest text handed to the device whose row is not back (a large number
        when none)."""
        return min((int(b.positions.min()) for b in (*self.in_flight, *self.again)), default=1 << 62)

    def encode(self, batches: Iterator[Batch], quantization: float, max_active_dims: int | None
               ) -> Iterator[tuple[Batch, SparseRows]]:
        again = self.again

        def feed() -> Iterator[Batch]:
            while (batch := again.popleft() if again else next(batches, None)) is not None:
                self.in_flight.append(batch)
                yield batch

        while True:
            try:
                for rows in self.encoder.encode_sparse(feed(), quantization, max_active_dims):
                    yield self.in_flight.popleft(), rows
                return
            except NonFiniteWeights as exc:
                raise NonFiniteWeights(int(self.in_flight[0].positions[exc.row]), exc.value) from None
            except torch.OutOfMemoryError:
                if not self.batcher.halve():
                    raise
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                log.warning("the device ran out of memory: batches of at most %d texts from now on (the vectors "
                            "do not change)", self.batcher.batch_size)
                again.extendleft(reversed([part for b in self.in_flight for part in self.batcher.split(b)]))
                self.in_flight.clear()


def _tokenized(encoder: Encoder, items: Iterable[tuple[str, str]], max_length: int, size: int
               ) -> Iterator[tuple[list[tuple[str, str]], Sequence[Sized]]]:
    """Chunks of ``size`` items with their tokens; the next chunk tokenised while this one is used."""
    def tokenize(chunk: list[tuple[str, str]]) -> Sequence[Sized]:
        return encoder.tokenize([t for _, t in chunk], max_length)

    items = iter(items)

    def take() -> list[tuple[str, str]]:
        return [x for _, x in zip(range(size), items)]

    with ThreadPoolExecutor(1, thread_name_prefix="tokenize") as pool:
        chunk = take()
        pending = pool.submit(tokenize, chunk) if chunk else None
        while chunk and pending is not None:
            tokens = pending.result()
            following = take()
            pending = pool.submit(tokenize, following) if following else None
            yield chunk, tokens
            chunk = following
