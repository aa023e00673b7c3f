"""One encode's settings, passed whole: what a vector depends on, and the runtime settings that change no byte.

A document's vector depends on the model, the corpus and :meth:`EncodeSettings.vector_key` (with the
encoder's numerics: :mod:`splade_rescale.encoding.vector_key`); the batching, the shard size, the
indexing threads and the size guard's budgets are runtime settings (the budgets decide whether a corpus
is built at all, never a byte of one that is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from splade_rescale.encoding.size_guard import Budgets
from splade_rescale.encoding.stream import CHUNK_TEXTS, Batching
from splade_rescale.encoding.vector_lines import COMPRESSOR, GZIP_LEVEL


@dataclass(frozen=True)
class EncodeSettings:
    """Texts cut at ``max_length`` tokens, weights ``round(w * quantization)``, each text's top
    ``max_active_dims`` kept (None: all); batches of at most ``batch_size`` texts and ``batch_tokens``
    padded tokens, ``chunk_size`` texts tokenised at once, short batches filled (``fill``; None: on CUDA);
    shards of at most ``shard_size`` documents and at least ``index_threads`` of them; the size guard's
    budgets (GB of this corpus, GB over the model's ``model_docs`` documents) judged on ``size_sample``
    documents."""

    max_length: int
    quantization: float = 100
    max_active_dims: int | None = None
    batch_size: int = 32
    batch_tokens: int | None = None
    chunk_size: int = CHUNK_TEXTS
    fill: bool | None = None
    shard_size: int = 100_000
    index_threads: int = 1
    budget_gb: float | None = None
    model_budget_gb: float | None = None
    model_docs: int | None = None
    size_sample: int = 2000

    def vector_key(self) -> dict[str, Any]:
        """The settings a vector line's bytes depend on (the compressor writes them)."""
        return {"max_length": self.max_length, "quantization": self.quantization,
                "max_active_dims": self.max_active_dims, "gzip": f"{COMPRESSOR}-{GZIP_LEVEL}"}

    @property
    def batching(self) -> Batching:
        return Batching(self.batch_size, self.batch_tokens, self.chunk_size, self.fill)

    def budgets(self, corpus_docs: int | None) -> Budgets:
        """The size guard's limits for a corpus of ``corpus_docs`` documents."""
        return Budgets(self.budget_gb, corpus_docs, self.model_budget_gb, self.model_docs)
