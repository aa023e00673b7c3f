"""The corpus stage: a corpus (or a part of it) -> Anserini's JsonVectorCollection shards + stats JSON.

Terms are vocabulary token ids written in decimal (``"2054"``), not token strings: ids are
plain ASCII words that pass unchanged through Lucene's ``-pretokenized`` whitespace
tokenisation for every vocabulary (WordPiece ``##`` pieces, byte-level BPE ``Ġ`` pieces,
tokens containing spaces or punctuation alike), and queries use the same ids.
Weights are ``round(w * quantization)``; zeros are dropped.

The documents flow down once: read in corpus order, batched by length bucket and encoded
(:mod:`splade_rescale.encoding.stream`), back in corpus order, cut into shards and written by a thread
(:mod:`splade_rescale.encoding.shard_writer`). A document's vector depends on the document alone, so
neither the batching, the shard size, the threads nor the parts change a byte. A run killed after
``k`` finished shards resumes at shard ``k`` (in a work folder beside the output, which Snakemake does
not delete) under the same vector key (model content, corpus, output settings, precision, device type:
:mod:`splade_rescale.encoding.vector_key`); other inputs start again, with one log line naming what
differs, so a corpus never mixes bf16 and fp32 shards. The size guard judges the job's first documents
(:mod:`splade_rescale.encoding.size_guard`). ``max_active_dims`` optionally keeps only each document's
top-k weights (sentence-transformers' name for the same pruning); off by default. A NaN or infinite
weight stops the encode with one line naming the model, the corpus and the document.

A corpus that declares another as its source of vectors copies the lines of the documents the source holds
(:mod:`splade_rescale.encoding.reuse`) and encodes only the rest.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

import numpy as np
from tqdm import tqdm

from splade_rescale.atomic import write_json
from splade_rescale.data.corpora import part_range
from splade_rescale.encoding.reuse import Reuse, encode_reusing, plan_reuse
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.encoding.shard_folder import ShardFolder, shard_docs_for, stats_path_for, work_folder
from splade_rescale.encoding.shard_writer import ShardWriter
from splade_rescale.encoding.size_guard import TooDenseError, check_budgets, measure_sample
from splade_rescale.encoding.stream import Encoder, encode_stream, non_finite_error, take_rows
from splade_rescale.encoding.vector_key import bf16_autocast, encoder_numerics, resume_inputs
from splade_rescale.encoding.vector_lines import Batches, TermStats
from splade_rescale.model.sparse_rows import NonFiniteWeights
from splade_rescale.model.splade import SpladeEncoder

log = logging.getLogger(__name__)


def load_encoder(model_dir: str | Path, head: str = "fused", device: str | None = None,
                 precision: str = "auto", texts: int | None = None) -> Encoder:
    """The project's SPLADE encoder for a saved MLM model folder (compiled for a job of ``texts``
    texts where that pays: :func:`splade_rescale.model.splade.worth_compiling`)."""
    return SpladeEncoder.from_pretrained(model_dir, head=head, device=device, precision=precision, texts=texts)


def _rows_between(batches: Batches, a: int, b: int) -> Batches:
    """The batches' rows of chunk positions ``[a, b)``, renumbered from ``a`` (a piece of one shard)."""
    out = []
    for positions, rows in batches:
        keep = np.flatnonzero((positions >= a) & (positions < b))
        if len(keep):
            out.append((positions[keep] - a, take_rows(rows, keep)))
    return out


def _chunks(encoder: Encoder, docs: Iterator[tuple[str, str]], settings: EncodeSettings, sample: int
            ) -> Iterator[tuple[list[tuple[str, str]], Batches]]:
    """The encoded stream, its first ``sample`` documents as one chunk of their own (the size guard judges
    them before the rest is encoded; a vector depends on its document alone, so the cut changes no byte)."""
    def stream(items: Iterable[tuple[str, str]]) -> Iterator[tuple[list[tuple[str, str]], Batches]]:
        return encode_stream(encoder, items, settings.max_length, settings.quantization, settings.max_active_dims,
                             settings.batching)

    if sample > 0:
        head = list(itertools.islice(docs, sample))
        if head:
            chunks = list(stream(head))
            yield [d for c, _ in chunks for d in c], _joined(chunks)
    yield from stream(docs)


def _joined(chunks: list[tuple[list[tuple[str, str]], Batches]]) -> Batches:
    """Consecutive chunks' batches as one chunk's (positions renumbered)."""
    out, offset = [], 0
    for chunk, batches in chunks:
        out += [(positions + offset, rows) for positions, rows in batches]
        offset += len(chunk)
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


def encode_docs(encoder: Encoder, docs: Iterable[tuple[str, str]], out_dir: str | Path, settings: EncodeSettings,
                total: int | None = None, inputs: Mapping[str, Any] | None = None, start: int = 0,
                stop: int | None = None) -> dict:
    """Write gzipped ``docs-00000.jsonl.gz``... (JsonVectorCollection) into ``out_dir``; return stats.

    ``total``: the corpus's document count (the size guard needs it). Finished shards of an interrupted
    run are verified and kept when it had the same vector key: ``inputs`` (what the vectors depend on
    upstream: model, corpus), :meth:`EncodeSettings.vector_key` and the encoder's numerics
    (:func:`encoder_numerics`); only the rest is encoded. ``start``, ``stop``: only the corpus's documents
    ``[start, stop)``, ``docs`` beginning at ``start`` (a part).
    """
    out_dir = Path(out_dir)
    folder = ShardFolder(work_folder(out_dir))
    end = total if stop is None else stop
    n_docs = None if end is None else end - start
    budgets = settings.budgets(total)
    numerics = encoder_numerics(encoder)
    key = {**(inputs or {}), "docs": total, **({"part": [start, end]} if start or stop is not None else {}),
           **settings.vector_key(), **numerics}
    finished = folder.start(key, shard_docs_for(n_docs, settings.shard_size, settings.index_threads), n_docs)
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
    if settings.budget_gb and not total:
        log.warning("no document count: the size guard of encoding.index_budget_gb cannot run on this corpus")
    t0 = time.perf_counter()
    writer = ShardWriter(folder, shard_docs, done)
    first = start + done  # the corpus position of the next chunk's first document
    try:
        if budgets.active() and finished:  # judged on the sample kept by the first run, or the finished shards
            kept = folder.size_sample or {"docs": done, "bytes": sum(r.bytes for r in finished), "nnz": prior.nnz}
            estimate = check_budgets(kept["docs"], kept["bytes"], kept["nnz"], budgets)
        sample = settings.size_sample if estimate is None and budgets.active() else 0
        with tqdm(total=n_docs, initial=done, desc="encode docs", unit="doc", mininterval=5) as bar:
            for chunk, batches in _chunks(encoder, docs, settings, sample):
                if estimate is None and budgets.active():  # the job's first documents are the size guard's sample
                    estimate = measure_sample(folder, [d for d, _ in chunk], batches, budgets)
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
            **settings.vector_key(), "precision": numerics["precision"], "device": numerics["device"],
            "shard_bytes": shard_bytes, "shard_bytes_per_doc": round(shard_bytes / stats.n, 1),
            "size_estimate": estimate}


class CorpusSource(NamedTuple):
    """A corpus to encode: its ``name``, config entry (``spec``) and ``root``; from its preparation the
    document count (``total``; None: counted here, or taken from ir_datasets / the published size) and the
    local files' digests (part of the vector key)."""

    name: str
    spec: Mapping[str, Any]
    root: str | Path = "."
    total: int | None = None
    files_sha256: Mapping[str, str] | None = None


def encode_corpus(encoder: Encoder, model_dir: str | Path, source: CorpusSource, out_dir: str | Path,
                  settings: EncodeSettings, part: int = 0, parts: int = 1, reuse: Reuse | None = None) -> dict:
    """CLI stage: a corpus (or a dataset's subset) -> JsonVectorCollection in ``out_dir`` + stats JSON beside.

    ``model_dir``: the encoder's saved model (its content is part of the vector key). ``part`` of
    ``parts``: only that contiguous range of the corpus (:func:`part_range`;
    :func:`splade_rescale.encoding.parts.join_parts` makes the corpus's collection of them). ``reuse``:
    the corpus's declared source of vectors (:mod:`splade_rescale.encoding.reuse`): a document the source
    holds gets its line there, the rest are encoded.
    """
    from splade_rescale.data.datasets import load_corpus

    name = source.name
    docs, known = load_corpus(name, source.spec, source.root, count=source.total is None)
    total = source.total or known
    start, stop = 0, None
    if parts > 1:
        if not total:
            raise ValueError(f"{name}: no document count, so it cannot be encoded in {parts} parts; fix: prepare "
                             "the corpus (prepare_corpus) first")
        start, stop = part_range(total, part, parts)
        if start >= stop:
            raise ValueError(f"{name}: part {part} of {parts} holds no documents ({total:,} in all); fix: plan fewer "
                             "parts")
        docs = itertools.islice(docs, start, None)
    inputs = resume_inputs(model_dir, name, source.spec, getattr(encoder, "head_impl", None), source.files_sha256)
    plan = plan_reuse(reuse, start, stop) if reuse else None
    try:
        if plan is None:
            stats = encode_docs(encoder, docs, out_dir, settings, total, inputs, start, stop)
        else:
            def own(docs: Iterator[tuple[str, str]], out: Path, count: int, tag: str) -> dict:
                """The documents the source lacks, size-guarded as the whole corpus would be."""
                budget = settings.budget_gb * count / total if settings.budget_gb and total else None
                return encode_docs(encoder, docs, out, replace(settings, budget_gb=budget), count,
                                   {**inputs, "reuse": tag})

            key = {**inputs, **encoder_numerics(encoder), **settings.vector_key()}
            stats = encode_reusing(reuse, plan, docs, Path(out_dir), own, key,
                                   shard_docs_for(len(plan.lines), settings.shard_size, settings.index_threads))
    except NonFiniteWeights as exc:
        raise non_finite_error(model_dir, exc, "document", f"corpus {name!r}") from None
    write_json(stats_path_for(out_dir), {"corpus": name, "model_dir": str(model_dir),
                                         "bf16_autocast": bf16_autocast(encoder), **stats})
    return stats


