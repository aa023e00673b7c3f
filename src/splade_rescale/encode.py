"""Encode corpora and queries with a SPLADE model into Anserini's JsonVectorCollection.

Terms are vocabulary token ids written in decimal (``"2054"``), not token strings: ids are
plain ASCII words that pass unchanged through Lucene's ``-pretokenized`` whitespace
tokenisation for every vocabulary (WordPiece ``##`` pieces, byte-level BPE ``Ġ`` pieces,
tokens containing spaces or punctuation alike), and queries use the same ids.
Weights are ``round(w * quantization)``; zeros are dropped.

Memory stays bounded whatever the corpus size: documents are read in chunks of
``chunk_size``, sorted by length inside the chunk (less padding), encoded in batches and
written back in corpus order. Shards are gzipped (Anserini reads ``.jsonl.gz``).

Disk stays bounded too: Anserini's impact index repeats each term by its weight, so a model
with thousands of non-zeros per document would write terabytes. After the first
``size_sample`` documents the shard and index sizes of the whole corpus are estimated; above
``budget_gb`` the encode stops with :class:`TooDenseError` (the workflow records "too dense
to index" and goes on). ``max_active_dims`` optionally keeps only each document's top-k
weights (sentence-transformers' name for the same pruning); off by default.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np
import torch
from tqdm import tqdm

from splade_rescale.atomic import atomic_dir, atomic_file, write_json

log = logging.getLogger(__name__)


# Bytes a Lucene impact index takes per non-zero document weight (postings, frequencies,
# skip data, term dictionary): 10.3 MB for 28,606 MS MARCO passages of ~180 non-zeros (2.0 B),
# 2.7-3.5 B on the demo's 300-500-passage indexes (fixed overhead); used only for the estimate.
INDEX_BYTES_PER_NONZERO = 2.0


class TooDenseError(RuntimeError):
    """A corpus whose estimated shards + index exceed the encoding budget."""


class Encoder(Protocol):
    def encode_batch(self, texts: Sequence[str], max_length: int) -> torch.Tensor: ...


def load_encoder(model_dir: str | Path, head: str = "fused", device: str | None = None,
                 precision: str = "auto") -> Encoder:
    """The project's SPLADE encoder for a saved MLM model folder."""
    from splade_rescale.splade import SpladeEncoder

    return SpladeEncoder.from_pretrained(model_dir, head=head, device=device, precision=precision)


def prune(reps: torch.Tensor, max_active_dims: int | None) -> torch.Tensor:
    """Keep each row's ``max_active_dims`` largest weights (None: keep all)."""
    if not max_active_dims or reps.shape[-1] <= max_active_dims:
        return reps
    values, idx = reps.topk(max_active_dims, dim=-1)
    return torch.zeros_like(reps).scatter_(-1, idx, values)


def quantize(reps: torch.Tensor, quantization: float) -> list[dict[str, int]]:
    """Rows of SPLADE weights -> {token_id: round(w * quantization)} without zeros."""
    q = torch.round(reps.float() * quantization).to(torch.int64)
    if (q < 0).any():
        raise ValueError("negative SPLADE weights: the encoder must end with log(1 + relu(.))")
    out: list[dict[str, int]] = []
    for row in q:
        idx = torch.nonzero(row, as_tuple=True)[0]
        out.append(dict(zip(map(str, idx.tolist()), row[idx].tolist())))
    return out


class _TermStats:
    """Counts per-term document frequencies (for FLOPS) and non-zeros."""

    def __init__(self) -> None:
        self.df: dict[str, int] = {}
        self.n = 0
        self.nnz = 0
        self.n_empty = 0

    def add(self, vec: Mapping[str, int]) -> None:
        self.n += 1
        self.nnz += len(vec)
        self.n_empty += not vec
        for t in vec:
            self.df[t] = self.df.get(t, 0) + 1

    def as_dict(self, kind: str, one: str) -> dict:
        return {f"n_{kind}": self.n, f"mean_nnz_per_{one}": self.nnz / self.n if self.n else 0.0,
                f"n_{kind}_empty_vector": self.n_empty,
                "term_df": dict(sorted(self.df.items(), key=lambda kv: int(kv[0])))}


def _chunks(it: Iterable, size: int, first: int | None = None) -> Iterator[list]:
    """Lists of ``size`` items (the first of ``first`` items, when given)."""
    it = iter(it)
    n = first or size
    while chunk := list(itertools.islice(it, n)):
        yield chunk
        n = size


def _encode_sorted(encoder: Encoder, texts: Sequence[str], max_length: int, batch_size: int,
                   quantization: float, max_active_dims: int | None = None) -> list[dict[str, int]]:
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    vecs: list[dict[str, int] | None] = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        reps = prune(encoder.encode_batch([texts[i] for i in idx], max_length), max_active_dims)
        for i, v in zip(idx, quantize(reps, quantization)):
            vecs[i] = v
    return vecs  # type: ignore[return-value]


def _gzip_text(path: Path) -> io.TextIOWrapper:
    """A gzip text writer without a timestamp in its header: a rerun writes identical bytes."""
    return io.TextIOWrapper(gzip.GzipFile(path, "wb", compresslevel=6, mtime=0), encoding="utf-8")


def _dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def size_estimate(n_docs: int, shard_bytes: int, nnz: int, total: int) -> dict:
    """Shard and index bytes of a ``total``-document corpus, from its first ``n_docs``."""
    shards = shard_bytes / n_docs * total
    index = nnz / n_docs * INDEX_BYTES_PER_NONZERO * total
    return {"sample_docs": n_docs, "total_docs": total, "shard_bytes": round(shards), "index_bytes": round(index),
            "gb": round((shards + index) / 1e9, 3)}


def encode_docs(encoder: Encoder, docs: Iterable[tuple[str, str]], out_dir: str | Path, max_length: int,
                batch_size: int = 32, quantization: float = 100, shard_size: int = 100_000,
                chunk_size: int = 20_000, total: int | None = None, *, budget_gb: float | None = None,
                size_sample: int = 2000, max_active_dims: int | None = None) -> dict:
    """Write gzipped ``docs-00000.jsonl.gz``... (JsonVectorCollection) atomically; return stats.

    With ``budget_gb`` and a known ``total``, raises :class:`TooDenseError` after
    ``size_sample`` documents if the whole corpus's estimated shards + index exceed it.
    """
    stats = _TermStats()
    estimate = None
    t0 = time.perf_counter()
    with atomic_dir(out_dir) as tmp, tqdm(total=total, desc="encode docs", unit="doc", mininterval=5) as bar:
        fh, written = None, 0
        sample = min(chunk_size, size_sample) if budget_gb and total else None  # encoded before the estimate
        for chunk in _chunks(docs, chunk_size, first=sample):
            vecs = _encode_sorted(encoder, [t for _, t in chunk], max_length, batch_size, quantization,
                                  max_active_dims)
            for (docid, _), vec in zip(chunk, vecs):
                if written % shard_size == 0:
                    if fh:
                        fh.close()
                    fh = _gzip_text(tmp / f"docs-{written // shard_size:05d}.jsonl.gz")
                fh.write(json.dumps({"id": docid, "contents": "", "vector": vec}, ensure_ascii=False) + "\n")
                written += 1
                stats.add(vec)
            bar.update(len(chunk))
            del vecs  # keep one chunk of vectors alive, not two
            if estimate is None and budget_gb and total:
                fh.flush()
                estimate = size_estimate(written, _dir_bytes(tmp), stats.nnz, total)
                log.info("size estimate for %d documents: %s", total, estimate)
                if estimate["shard_bytes"] + estimate["index_bytes"] > budget_gb * 1e9:
                    fh.close()
                    raise TooDenseError(f"too dense to index (estimated {estimate['gb']:.1f} GB of shards and "
                                        f"index > budget {budget_gb:g} GB; {stats.nnz / written:.0f} non-zeros "
                                        f"per document)")
        if fh:
            fh.close()
        if not written:
            raise ValueError(f"{out_dir}: no documents to encode; check the dataset")
        shard_bytes = _dir_bytes(tmp)
    secs = time.perf_counter() - t0
    if stats.n_empty:
        log.warning("%d of %d documents have an all-zero vector (Anserini skips them)", stats.n_empty, written)
    return {**stats.as_dict("docs", "doc"), "seconds": round(secs, 3), "docs_per_second": round(written / secs, 2),
            "quantization": quantization, "max_length": max_length, "max_active_dims": max_active_dims,
            "shard_bytes": shard_bytes, "shard_bytes_per_doc": round(shard_bytes / written, 1),
            "size_estimate": estimate}


def encode_query_dict(encoder: Encoder, queries: Mapping[str, str], out_path: str | Path, max_length: int,
                      batch_size: int = 32, quantization: float = 100) -> dict:
    """Write ``{"id": qid, "vector": {token_id: int}}`` JSONL atomically; return stats."""
    qids = list(queries)
    t0 = time.perf_counter()
    vecs = _encode_sorted(encoder, [queries[q] for q in qids], max_length, batch_size, quantization)
    secs = time.perf_counter() - t0
    stats = _TermStats()
    with atomic_file(out_path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for qid, vec in zip(qids, vecs):
            fh.write(json.dumps({"id": qid, "vector": vec}) + "\n")
            stats.add(vec)
    if stats.n_empty:
        log.warning("%d of %d queries have an all-zero vector", stats.n_empty, len(vecs))
    return {**stats.as_dict("queries", "query"), "seconds": round(secs, 3),
            "queries_per_second_encoding": round(len(qids) / secs, 2) if secs else None,
            "quantization": quantization, "max_length": max_length}


def stats_path_for(out: str | Path) -> Path:
    """Where the stats JSON of an output goes: beside it (Anserini would read a file inside)."""
    out = Path(out)
    return out.with_name(out.name + ".stats.json")


def bf16_autocast(enc: Encoder) -> bool | None:
    """Whether the encoder computes under bf16 autocast (``precision: auto`` depends on the device)."""
    from splade_rescale.splade import SpladeEncoder, uses_bf16

    return uses_bf16(enc.device, enc.precision) if isinstance(enc, SpladeEncoder) else None


def encode_corpus(model_dir: str | Path, corpus_spec: Mapping, out_dir: str | Path, max_length: int,
                  batch_size: int = 32, quantization: float = 100, head: str = "fused", shard_size: int = 100_000,
                  *, name: str = "corpus", root: str | Path = ".", device: str | None = None,
                  encoder: Encoder | None = None, chunk_size: int = 20_000, precision: str = "auto",
                  budget_gb: float | None = None, max_active_dims: int | None = None) -> dict:
    """CLI stage: a corpus (or a dataset's subset) -> JsonVectorCollection in ``out_dir`` + stats JSON beside."""
    from splade_rescale.datasets import load_corpus

    docs, total = load_corpus(name, corpus_spec, root)
    enc = encoder or load_encoder(model_dir, head=head, device=device, precision=precision)
    stats = encode_docs(enc, docs, out_dir, max_length, batch_size, quantization, shard_size, chunk_size, total,
                        budget_gb=budget_gb, max_active_dims=max_active_dims)
    write_json(stats_path_for(out_dir), {"corpus": name, "model_dir": str(model_dir),
                                         "bf16_autocast": bf16_autocast(enc), **stats})
    return stats


def encode_queries(model_dir: str | Path, dataset_spec: Mapping, out_path: str | Path, max_length: int,
                   batch_size: int = 32, quantization: float = 100, head: str = "fused",
                   *, name: str = "dataset", root: str | Path = ".", device: str | None = None,
                   encoder: Encoder | None = None, precision: str = "auto") -> dict:
    """CLI stage: a dataset's judged (subset) queries -> query-vector JSONL + stats JSON beside."""
    from splade_rescale.datasets import load_dataset

    ds = load_dataset(name, dataset_spec, root)
    enc = encoder or load_encoder(model_dir, head=head, device=device, precision=precision)
    stats = encode_query_dict(enc, ds.queries, out_path, max_length, batch_size, quantization)
    write_json(stats_path_for(out_path), {"dataset": name, "model_dir": str(model_dir),
                                          "bf16_autocast": bf16_autocast(enc), **stats})
    return stats


def read_stats(path: str | Path) -> dict:
    """Read a stats JSON written by this module."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def term_df_array(stats: Mapping, vocab_size: int | None = None) -> np.ndarray:
    """The ``term_df`` of a stats dict as a dense array (index = token id)."""
    df = stats["term_df"]
    size = vocab_size or (max(map(int, df), default=-1) + 1)
    arr = np.zeros(size, dtype=np.int64)
    for t, c in df.items():
        arr[int(t)] = c
    return arr
