"""Encode corpora and queries with a SPLADE model into Anserini's JsonVectorCollection.

Terms are vocabulary token ids written in decimal (``"2054"``), not token strings: ids are
plain ASCII words that pass unchanged through Lucene's ``-pretokenized`` whitespace
tokenisation for every vocabulary (WordPiece ``##`` pieces, byte-level BPE ``Ġ`` pieces,
tokens containing spaces or punctuation alike), and queries use the same ids.
Weights are ``round(w * quantization)``; zeros are dropped.

The device does the dense work: the encoder hands the host only each text's non-zero
quantised weights (:mod:`splade_rescale.model.sparse_rows`). Host work overlaps the device: a
tokeniser thread tokenises the next chunk (on the fast tokenizer's own threads) while the model runs,
the encoder queues batch k + 1 before reading back batch k, and a writer thread formats,
compresses and writes the previous chunk (:class:`splade_rescale.retrieval.shard_folder.ShardWriter`).

Memory stays bounded whatever the corpus size: documents are read in windows of
``chunk_size``, tokenised once, sorted by token count inside the window and cut into batches by a
count and a token budget (almost no padding: docs/measurements.md), encoded and written back in
corpus order. The windows lie on a fixed grid of the corpus's document order
(:func:`grid_floor`), so which documents share a batch, and hence every float bit, depends neither
on the shard size, nor on the indexing threads, nor on how the corpus is split into parts (each
a separate job over a contiguous, grid-aligned range: ``start``, ``stop``). Shards are cut from
the windows' output. A run killed after ``k`` finished shards resumes at shard ``k`` (in a work
folder beside the output, which Snakemake does not delete), encoding that shard's window whole
again, and writes the same bytes as an uninterrupted run. It resumes only under the same inputs
(the model's content, the corpus and its document count, the output settings, the effective
precision, the device and the batching, which sets the padding and hence bf16's sums); other
inputs start again, with one log line naming what differs, so a corpus never mixes bf16 and fp32
shards. There are at least ``index_threads`` shards when the corpus is large enough (Anserini
indexes each file on one thread).

Disk stays bounded too: Anserini's impact index repeats each term by its weight, so a model
with thousands of non-zeros per document would write terabytes. After the job's first
window (the corpus's first ``size_sample`` documents) the shard and index sizes of the whole corpus are estimated; above
``budget_gb`` the encode stops with :class:`TooDenseError` (the workflow records "too dense
to index" and goes on) and its work folder goes. A resumed run judges the same sample, kept in
the work folder. The same bytes per document, over all the documents of every corpus
the model encodes (``model_docs``), are held against ``model_budget_gb``: a model that passes
each corpus's budget could still fill the disk over all of them. The corpus's document
count comes from its preparation (``prepare_corpus``), so the guard runs whether or not
ir_datasets knows the count. ``max_active_dims`` optionally keeps only each document's
top-k weights (sentence-transformers' name for the same pruning); off by default. A NaN or
infinite weight stops the encode with one line naming the model, the corpus and the document.

A corpus that declares another as its source of vectors copies the lines of the documents the source holds
(:mod:`splade_rescale.encoding.reuse`) and encodes only the rest.

Over 400 lines (about 670) because batching on the grid, the size guard, the parts and
the CLI stages all act on one window loop.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np
from tqdm import tqdm

from splade_rescale.atomic import atomic_dir, atomic_file, write_json
from splade_rescale.data.corpora import part_range
from splade_rescale.encoding.reuse import Reuse, encode_reusing, plan_reuse
from splade_rescale.model.sparse_rows import NonFiniteWeights
from splade_rescale.model.splade import SpladeEncoder
from splade_rescale.retrieval.batch_stream import CHUNK_TEXTS, Encoder, encode_stream, take_rows
from splade_rescale.retrieval.batch_stream import Batching as StreamBatching
from splade_rescale.retrieval.shard_folder import (
    COMPRESSOR,
    GZIP_LEVEL,
    Batches,
    ShardFolder,
    ShardWriter,
    TermStats,
    VectorLines,
    bf16_autocast,
    doc_prefix,
    encoder_numerics,
    gzip_compressor,
    query_prefix,
    resume_inputs,
    shard_docs_for,
    work_folder,
)

log = logging.getLogger(__name__)


# Bytes a Lucene impact index takes per non-zero document weight (postings, frequencies,
# skip data, term dictionary), measured on MS MARCO passages of ~180 non-zeros (2.0 B) and
# higher on the demo's small indexes (fixed overhead); used only for the estimate.
INDEX_BYTES_PER_NONZERO = 2.0


class TooDenseError(RuntimeError):
    """A corpus whose estimated shards + index exceed the encoding budget."""


def load_encoder(model_dir: str | Path, head: str = "fused", device: str | None = None,
                 precision: str = "auto", texts: int | None = None) -> Encoder:
    """The project's SPLADE encoder for a saved MLM model folder (compiled for a job of ``texts``
    texts where that pays: :func:`splade_rescale.model.splade.worth_compiling`)."""
    return SpladeEncoder.from_pretrained(model_dir, head=head, device=device, precision=precision, texts=texts)


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


def _check_budgets(n_docs: int, shard_bytes: int, nnz: int, budgets: Budgets) -> dict:
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


def _rows_between(batches: Batches, a: int, b: int) -> Batches:
    """The batches' rows of chunk positions ``[a, b)``, renumbered from ``a`` (a piece of one shard)."""
    out = []
    for positions, rows in batches:
        keep = np.flatnonzero((positions >= a) & (positions < b))
        if len(keep):
            out.append((positions[keep] - a, take_rows(rows, keep)))
    return out


def _skip(docs: Iterator[tuple[str, str]], n: int) -> str | None:
    """Advance ``docs`` by ``n`` documents; the last id passed."""
    seen = None
    for seen, _ in itertools.islice(docs, n):
        pass
    return seen


def _changed(folder: ShardFolder, last_id: str | None, seen: str | None) -> ValueError:
    shutil.rmtree(folder.root, ignore_errors=True)
    return ValueError(f"{folder.root}: its finished shards end at document {last_id!r}, but the corpus has "
                      f"{seen!r} there; the corpus changed since: its work folder is removed, rerun to encode "
                      "it from the start")


def _measure(folder: ShardFolder, docids: Sequence[str], batches: Batches, budgets: Budgets) -> dict:
    """The size guard's verdict on the job's first documents, their size kept so that a resumed run judges the same."""
    c = gzip_compressor()
    data = VectorLines().ordered([doc_prefix(d) for d in docids], batches)
    nbytes, nnz = len(c.compress(data)) + len(c.flush()), sum(int(rows.indptr[-1]) for _, rows in batches)
    folder.save_size_sample(len(docids), nbytes, nnz)
    return _check_budgets(len(docids), nbytes, nnz, budgets)


def encode_docs(encoder: Encoder, docs: Iterable[tuple[str, str]], out_dir: str | Path, max_length: int,
                batch_size: int = 32, quantization: float = 100, shard_size: int = 100_000,
                chunk_size: int = CHUNK_TEXTS, total: int | None = None, *, budget_gb: float | None = None,
                model_budget_gb: float | None = None, model_docs: int | None = None,
                size_sample: int = 2000, max_active_dims: int | None = None, index_threads: int = 1,
                inputs: Mapping[str, Any] | None = None, batch_tokens: int | None = None, start: int = 0,
                stop: int | None = None) -> dict:
    """Write gzipped ``docs-00000.jsonl.gz``... (JsonVectorCollection) into ``out_dir``; return stats.

    With ``budget_gb`` and a known ``total``, raises :class:`TooDenseError` once the job's first
    ``size_sample`` documents are encoded if the whole corpus's estimated shards + index exceed it; with
    ``model_budget_gb`` and ``model_docs`` (all the model's corpora), if the same bytes per
    document over ``model_docs`` documents exceed that.
    Finished shards of an interrupted run are verified and kept when it had the same
    ``inputs`` (what the vectors depend on upstream: model, corpus), output settings and encoder
    numerics (:func:`encoder_numerics`); only the rest is encoded. The batching (``batch_size``,
    ``batch_tokens``, ``chunk_size``) is no input: a document's vector depends on the document alone
    (:mod:`splade_rescale.retrieval.buckets`). ``start``, ``stop``: only the corpus's documents
    ``[start, stop)``, ``docs`` beginning at ``start`` (a part).
    """
    out_dir = Path(out_dir)
    folder = ShardFolder(work_folder(out_dir))
    end = total if stop is None else stop
    n_docs = None if end is None else end - start
    budgets = Budgets(budget_gb, total, model_budget_gb, model_docs)
    numerics = encoder_numerics(encoder)
    key = {**(inputs or {}), "docs": total, **({"part": [start, end]} if start or stop is not None else {}),
           "max_length": max_length, "quantization": quantization, "max_active_dims": max_active_dims,
           "gzip": f"{COMPRESSOR}-{GZIP_LEVEL}", **numerics, "size_sample": size_sample}
    finished = folder.start(key, shard_docs_for(n_docs, shard_size, index_threads), n_docs)
    shard_docs = folder.shard_docs  # an earlier run's, where its shards are kept
    done = sum(r.docs for r in finished)
    last_id = finished[-1].last_id if finished else None
    prior = TermStats()
    for r in finished:
        prior.merge(folder.stats(r))
    if finished:
        log.info("resuming at shard %d: %d documents in %d verified shards, %s to encode", len(finished), done,
                 len(finished), "the rest" if n_docs is None else f"{n_docs - done}")
    docs = iter(docs)
    if (seen := _skip(docs, done)) != last_id:
        raise _changed(folder, last_id, seen)
    if stop is not None:
        docs = itertools.islice(docs, stop - start - done)

    estimate = None
    if budget_gb and not total:
        log.warning("no document count: the size guard of encoding.index_budget_gb cannot run on this corpus")
    t0 = time.perf_counter()
    writer = ShardWriter(folder, shard_docs, done)
    first = start + done  # the corpus position of the next chunk's first document
    try:
        if budgets.active() and finished:  # judged on the sample kept by the first run, or the finished shards
            kept = folder.size_sample or {"docs": done, "bytes": sum(r.bytes for r in finished), "nnz": prior.nnz}
            estimate = _check_budgets(kept["docs"], kept["bytes"], kept["nnz"], budgets)
        stream = encode_stream(encoder, docs, max_length, quantization, max_active_dims,
                               StreamBatching(batch_size, batch_tokens, chunk_size))
        with tqdm(total=n_docs, initial=done, desc="encode docs", unit="doc", mininterval=5) as bar:
            for chunk, batches in stream:
                if estimate is None and budgets.active():  # the job's first documents are the size guard's sample
                    n = min(size_sample, len(chunk)) if size_sample > 0 else len(chunk)
                    estimate = _measure(folder, [d for d, _ in chunk[:n]], _rows_between(batches, 0, n), budgets)
                a = 0
                while a < len(chunk):  # cut at shard boundaries: a shard is a contiguous range of the part
                    b = min(len(chunk), a + shard_docs - (first + a - start) % shard_docs)
                    writer.put([d for d, _ in chunk[a:b]],
                               batches if (a, b) == (0, len(chunk)) else _rows_between(batches, a, b))
                    a = b
                bar.update(len(chunk))
                first += len(chunk)
            writer.close()
    except TooDenseError:
        writer.abort(write_queued=False)
        shutil.rmtree(folder.root, ignore_errors=True)  # the record is final: nothing to resume
        raise
    except BaseException:
        writer.abort()  # finished shards stay for the rerun
        raise
    encoded = writer.stats.n
    stats = prior.merge(writer.stats)
    if not stats.n:
        shutil.rmtree(folder.root, ignore_errors=True)
        raise ValueError(f"{out_dir}: no documents to encode; check the dataset")
    shard_bytes = sum(p.stat().st_size for p in folder.shards.iterdir())
    n_shards = len(list(folder.shards.iterdir()))
    folder.finish(out_dir)
    secs = time.perf_counter() - t0
    if stats.n_empty:
        log.warning("%d of %d documents have an all-zero vector (Anserini skips them)", stats.n_empty, stats.n)
    return {**stats.as_dict("docs", "doc"), "seconds": round(secs, 3),
            "docs_per_second": round(encoded / secs, 2) if encoded else None,
            "resumed_docs": done, "encoded_docs": encoded, "shards": n_shards, "shard_docs": shard_docs,
            "gzip": f"{COMPRESSOR}-{GZIP_LEVEL}", "precision": numerics["precision"], "device": numerics["device"],
            "quantization": quantization, "max_length": max_length, "max_active_dims": max_active_dims,
            "shard_bytes": shard_bytes, "shard_bytes_per_doc": round(shard_bytes / stats.n, 1),
            "size_estimate": estimate}


def encode_query_dict(encoder: Encoder, queries: Mapping[str, str], out_path: str | Path, max_length: int,
                      batch_size: int = 32, quantization: float = 100) -> dict:
    """Write ``{"id": qid, "vector": {token_id: int}}`` JSONL atomically; return stats. Queries are batched
    by length bucket like documents, so a query's vector depends on the query alone."""
    qids = list(queries)
    t0 = time.perf_counter()
    chunks = list(encode_stream(encoder, [(q, queries[q]) for q in qids], max_length, quantization, None,
                                StreamBatching(batch_size, None, max(1, len(qids)))))
    secs = time.perf_counter() - t0
    stats = TermStats()
    with atomic_file(out_path) as tmp, open(tmp, "wb") as f:
        lines = VectorLines()
        for chunk, batches in chunks:
            for _, rows in batches:
                stats.add(rows)
            f.write(lines.ordered([query_prefix(q) for q, _ in chunk], batches))
    if stats.n_empty:
        log.warning("%d of %d queries have an all-zero vector", stats.n_empty, len(qids))
    return {**stats.as_dict("queries", "query"), "seconds": round(secs, 3),
            "queries_per_second_encoding": round(len(qids) / secs, 2) if secs else None,
            "quantization": quantization, "max_length": max_length}


def stats_path_for(out: str | Path) -> Path:
    """Where the stats JSON of an output goes: beside it (Anserini would read a file inside)."""
    out = Path(out)
    return out.with_name(out.name + ".stats.json")


NON_FINITE_FIX = ("fix: the model's weights or activations overflowed (see its training log for a divergence); "
                  "retrain it, or encode with encoding.precision: fp32 if only bf16 overflows")


def encode_corpus(model_dir: str | Path, corpus_spec: Mapping, out_dir: str | Path, max_length: int,
                  batch_size: int = 32, quantization: float = 100, head: str = "fused", shard_size: int = 100_000,
                  *, name: str = "corpus", root: str | Path = ".", device: str | None = None,
                  encoder: Encoder | None = None, chunk_size: int = CHUNK_TEXTS, precision: str = "auto",
                  budget_gb: float | None = None, max_active_dims: int | None = None,
                  index_threads: int = 1, total: int | None = None, model_budget_gb: float | None = None,
                  model_docs: int | None = None, files_sha256: Mapping[str, str] | None = None,
                  part: int = 0, parts: int = 1, reuse: Reuse | None = None) -> dict:
    """CLI stage: a corpus (or a dataset's subset) -> JsonVectorCollection in ``out_dir`` + stats JSON beside.

    ``total``: the corpus's document count from its preparation; without it the corpus is
    counted here (a local one) or taken from ir_datasets / the published size. ``files_sha256``:
    the local files' digests from the same preparation, part of the resume key. ``part`` of
    ``parts``: only that contiguous range of the corpus (:func:`part_range`; :func:`join_parts`
    makes the corpus's collection of them). ``reuse``: the corpus's declared source of vectors
    (:mod:`splade_rescale.encoding.reuse`): a document the source holds gets its line there, the rest are encoded.
    """
    from splade_rescale.data.datasets import load_corpus

    docs, known = load_corpus(name, corpus_spec, root, count=total is None)
    total = total or known
    start, stop = 0, None
    if parts > 1:
        if not total:
            raise ValueError(f"{name}: no document count, so it cannot be encoded in {parts} parts; fix: prepare "
                             "the corpus (prepare_corpus) first")
        start, stop = part_range(total, part, parts)
        if start >= stop:
            raise ValueError(f"{name}: part {part} of {parts} holds no documents ({total:,} in all); fix: raise "
                             "encoding.part_docs")
        docs = itertools.islice(docs, start, None)
    enc = encoder or load_encoder(model_dir, head=head, device=device, precision=precision, texts=total)
    inputs = resume_inputs(model_dir, name, corpus_spec, head, files_sha256)
    plan = plan_reuse(reuse, start, stop) if reuse else None
    try:
        if plan is None:
            stats = encode_docs(enc, docs, out_dir, max_length, batch_size, quantization, shard_size, chunk_size,
                                total, budget_gb=budget_gb, model_budget_gb=model_budget_gb, model_docs=model_docs,
                                max_active_dims=max_active_dims, index_threads=index_threads, inputs=inputs,
                                start=start, stop=stop)
        else:
            def own(docs: Iterator[tuple[str, str]], out: Path, count: int, tag: str) -> dict:
                """The documents the source lacks, size-guarded as the whole corpus would be."""
                return encode_docs(enc, docs, out, max_length, batch_size, quantization, shard_size, chunk_size, count,
                                   budget_gb=budget_gb * count / total if budget_gb and total else None,
                                   model_budget_gb=model_budget_gb, model_docs=model_docs,
                                   max_active_dims=max_active_dims, index_threads=index_threads,
                                   inputs={**inputs, "reuse": tag})

            key = {**inputs, **encoder_numerics(enc), "max_length": max_length, "quantization": quantization,
                   "max_active_dims": max_active_dims}
            stats = encode_reusing(reuse, plan, docs, Path(out_dir), own, key,
                                   shard_docs_for(len(plan.lines), shard_size, index_threads))
    except NonFiniteWeights as exc:
        raise ValueError(f"{model_dir}: non-finite SPLADE weight ({exc.value}) for document {exc.item!r} of corpus "
                         f"{name!r}; {NON_FINITE_FIX}") from None
    write_json(stats_path_for(out_dir), {"corpus": name, "model_dir": str(model_dir),
                                         "bf16_autocast": bf16_autocast(enc), **stats})
    return stats


def join_parts(parts: Sequence[str | Path], out_dir: str | Path) -> dict:
    """CLI stage: a corpus's parts, in order -> its one collection (hard links, no copy: shards numbered on in
    corpus order, so the index reads the documents in the order of a one-job encode) + the stats JSON beside
    it, summed over the parts. A part that left a SKIPPED record (collapsed, too dense) is the corpus's record."""
    from splade_rescale.retrieval.skips import SKIPPED, skipped

    records = [json.loads(stats_path_for(p).read_text()) for p in parts]
    with atomic_dir(out_dir) as tmp:
        if (record := next((skipped(Path(p)) for p in parts if skipped(Path(p))), None)) is not None:
            write_json(tmp / SKIPPED, record)
            write_json(stats_path_for(out_dir), record)
            return record
        k = 0
        for p in parts:
            for shard in sorted(Path(p).glob("docs-*.jsonl.gz")):
                _link_or_copy(shard, tmp / f"docs-{k:05d}.jsonl.gz")
                k += 1
    df: Counter[str] = Counter()
    for r in records:
        df.update(r["term_df"])
    n, nnz = sum(r["n_docs"] for r in records), sum(df.values())  # a document counts a term once: df sums to nnz
    sums = {key: sum(r[key] for r in records) for key in ("n_docs_empty_vector", "seconds", "resumed_docs",
                                                           "encoded_docs", "shard_bytes")}
    if any("reused_docs" in r for r in records):  # parts that copied lines from a declared source
        sums["reused_docs"] = sum(r.get("reused_docs", 0) for r in records)
    stats = {**records[0], **sums, "n_docs": n, "mean_nnz_per_doc": nnz / n, "shards": k, "parts": len(parts),
             "term_df": dict(sorted(df.items(), key=lambda kv: int(kv[0]))),
             "docs_per_second": round(sums["encoded_docs"] / sums["seconds"], 2) if sums["seconds"] else None,
             "shard_bytes_per_doc": round(sums["shard_bytes"] / n, 1)}
    write_json(stats_path_for(out_dir), stats)
    return stats


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copyfile(src, dst)


def encode_queries(model_dir: str | Path, dataset_spec: Mapping, out_path: str | Path, max_length: int,
                   batch_size: int = 32, quantization: float = 100, head: str = "fused",
                   *, name: str = "dataset", root: str | Path = ".", device: str | None = None,
                   encoder: Encoder | None = None, precision: str = "auto") -> dict:
    """A dataset's judged (subset) queries -> query-vector JSONL + stats JSON beside."""
    from splade_rescale.data.datasets import load_dataset

    ds = load_dataset(name, dataset_spec, root)
    enc = encoder or load_encoder(model_dir, head=head, device=device, precision=precision)
    try:
        stats = encode_query_dict(enc, ds.queries, out_path, max_length, batch_size, quantization)
    except NonFiniteWeights as exc:
        raise ValueError(f"{model_dir}: non-finite SPLADE weight ({exc.value}) for query {exc.item!r} of dataset "
                         f"{name!r}; {NON_FINITE_FIX}") from None
    write_json(stats_path_for(out_path), {"dataset": name, "model_dir": str(model_dir),
                                          "bf16_autocast": bf16_autocast(enc), **stats})
    return stats


def encode_query_sets(model_dir: str | Path, query_sets: Mapping[str, Mapping], out_dir: str | Path,
                      batch_size: int = 32, quantization: float = 100, head: str = "fused",
                      *, root: str | Path = ".", device: str | None = None, encoder: Encoder | None = None,
                      precision: str = "auto") -> dict[str, dict]:
    """CLI stage: every dataset's queries with one model load -> ``out_dir/{dataset}.jsonl`` + stats.

    ``query_sets``: dataset name -> ``{"spec": its config entry, "max_length": its query length}``.
    One job per model instead of one per dataset: a model load and device start-up cost more than
    encoding most query sets.
    """
    enc = encoder or load_encoder(model_dir, head=head, device=device, precision=precision)
    out = {}
    for name, qs in tqdm(query_sets.items(), desc="query sets", unit="set"):
        out[name] = encode_queries(model_dir, qs["spec"], Path(out_dir) / f"{name}.jsonl", qs["max_length"],
                                   batch_size, quantization, name=name, root=root, encoder=enc)
        log.info("%s: %d queries", name, out[name]["n_queries"])
    return out

