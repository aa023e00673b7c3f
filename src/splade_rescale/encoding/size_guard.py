"""The size guard: a corpus whose shards and impact index would not fit stops early, as "too dense".

Anserini's impact index repeats each term by its weight, so a model with thousands of non-zeros per
document would write terabytes. Once the job's first ``size_sample`` documents are encoded, the shard and
index sizes of the whole corpus are estimated from them; above the corpus's budget the encode stops with
:class:`TooDenseError` (the workflow records "too dense to index" and goes on). The same bytes per
document over all the documents of every corpus the model encodes are held against the model's budget:
a model that passes each corpus's budget could still fill the disk over all of them. A resumed run
judges the same sample, kept in its work folder.
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Sequence

from splade_rescale.encoding.shard_folder import ShardFolder
from splade_rescale.encoding.vector_lines import Batches, VectorLines, doc_prefix, gzip_compressor

log = logging.getLogger(__name__)


# Bytes a Lucene impact index takes per non-zero document weight (postings, frequencies,
# skip data, term dictionary), measured on MS MARCO passages of ~180 non-zeros (2.0 B) and
# higher on the demo's small indexes (fixed overhead); used only for the estimate.
INDEX_BYTES_PER_NONZERO = 2.0


class TooDenseError(RuntimeError):
    """A corpus whose estimated shards + index exceed the encoding budget."""


def size_estimate(n_docs: int, shard_bytes: int, nnz: int, total: int) -> dict:
    """Shard and index bytes of a ``total``-document corpus, from its first ``n_docs``."""
    shards = shard_bytes / n_docs * total
    index = nnz / n_docs * INDEX_BYTES_PER_NONZERO * total
    return {"sample_docs": n_docs, "total_docs": total, "shard_bytes": round(shards), "index_bytes": round(index),
            "gb": round((shards + index) / 1e9, 3)}


class Budgets(NamedTuple):
    """The size guard's limits: this corpus's (GB, documents) and the model's over all its corpora."""

    corpus_gb: float | None = None
    corpus_docs: int | None = None
    model_gb: float | None = None
    model_docs: int | None = None

    def active(self) -> bool:
        return bool(self.corpus_gb and self.corpus_docs) or bool(self.model_gb and self.model_docs)


def check_budgets(n_docs: int, shard_bytes: int, nnz: int, budgets: Budgets) -> dict:
    """The corpus's size estimate (and the model's); TooDenseError when either is over its budget."""
    def gb(estimate: dict) -> float:
        return (estimate["shard_bytes"] + estimate["index_bytes"]) / 1e9

    total = budgets.corpus_docs or n_docs
    estimate = size_estimate(n_docs, shard_bytes, nnz, total)
    budget = f"{budgets.corpus_gb:g} GB" if budgets.corpus_gb else "off"
    where = f"{nnz / n_docs:.0f} non-zeros per document"
    model = None
    if budgets.model_gb and budgets.model_docs:
        model = size_estimate(n_docs, shard_bytes, nnz, budgets.model_docs)
        estimate.update(model_docs=budgets.model_docs, model_gb=model["gb"])
    log.info("size estimate for %d documents: %s", total, estimate)
    if budgets.corpus_gb and budgets.corpus_docs and gb(estimate) > budgets.corpus_gb:
        raise TooDenseError(f"too dense to index (estimated {gb(estimate):.1f} GB of shards and index > budget "
                            f"{budget} (encoding.index_budget_gb); {where}); fix: set encoding.max_active_dims "
                            "or raise encoding.index_budget_gb")
    if model and gb(model) > budgets.model_gb:
        raise TooDenseError(f"too dense to index (estimated {gb(model):.1f} GB of shards and indexes over the "
                            f"model's {budgets.model_docs:,} documents in all its corpora > encoding.model_budget_gb "
                            f"{budgets.model_gb:g} GB; this corpus {gb(estimate):.1f} GB, encoding.index_budget_gb "
                            f"{budget}; {where}); fix: set encoding.max_active_dims or raise encoding.model_budget_gb")
    return estimate


def measure_sample(folder: ShardFolder, docids: Sequence[str], batches: Batches, budgets: Budgets) -> dict:
    """The size guard's verdict on the job's first documents, their size kept so that a resumed run judges the same."""
    c = gzip_compressor()
    data = VectorLines().ordered([doc_prefix(d) for d in docids], batches)
    nbytes, nnz = len(c.compress(data)) + len(c.flush()), sum(int(rows.indptr[-1]) for _, rows in batches)
    folder.save_size_sample(len(docids), nbytes, nnz)
    return check_budgets(len(docids), nbytes, nnz, budgets)
