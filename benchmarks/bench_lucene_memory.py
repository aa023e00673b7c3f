"""Peak memory of the impact index and search jobs, JVM and Python side, at the sizes one machine allows.

Each measurement runs in a fresh process, as a workflow job does: the JVM started at the heap the
job's declared ``mem_mb`` gives it (``lucene.jvm_heap_mb`` of ``lucene.MEM_MB``), then the job's own
function (``run_build_impact_index``: the direct builder; ``run_impact_search``: SimpleImpactSearcher
at k = 1000, the hits into Python, the run file written). Reported: the process's peak RSS (VmHWM:
Java heap, the JVM's own memory and Python's, together, and the index files it maps), the peaks of its
anonymous and file-backed parts, and the Java heap's peak (the sum of the heap pools' peak usage, an
upper bound). SYNTHETIC data: documents of 160 random terms of a 30,000-term
vocabulary, 80 of them among the first 2,000 (weights 1-300), queries of 12 of those 2,000 terms, so
that every query matches more than k documents (the hits are counted from the run file). The script
fits RSS = a + b x (documents or hits) over the sizes given.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_lucene_memory.py --docs 100000 300000 1000000 \
        --queries 1000 3000 10000
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, sys
from splade_rescale.retrieval import lucene
what, mem_mb, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lucene.ensure_pyserini(f"{lucene.jvm_heap_mb(mem_mb)}m", 1)
if what == "index":
    lucene.run_build_impact_index(a, b, threads=1)
else:
    lucene.run_impact_search(a, b, b + ".run", k=1000, threads=1)
mx = lucene._autoclass("java.lang.management.ManagementFactory")
pools = mx.getMemoryPoolMXBeans().toArray()
heap = sum(p.getPeakUsage().getUsed() for p in pools if p.getType().toString() == "Heap memory")
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"peak_rss_mb": rss * 1024 / 1e6, "java_heap_peak_mb": heap / 1e6}))
"""


def write_collection(folder: Path, docs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    per_shard = 100_000
    for start in range(0, docs, per_shard):
        with gzip.open(folder / f"docs-{start // per_shard:05d}.jsonl.gz", "wt", compresslevel=1) as f:
            for i in range(start, min(docs, start + per_shard)):
                terms = rng.sample(range(2_000), 80) + rng.sample(range(2_000, 30_000), 80)
                vector = ", ".join(f'"{t}": {rng.randint(1, 300)}' for t in terms)
                f.write(f'{{"id": "d{i}", "contents": "", "vector": {{{vector}}}}}\n')


def write_queries(path: Path, queries: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(queries):
            f.write(json.dumps({"id": f"q{i}", "vector": {str(t): rng.randint(1, 300)
                                                          for t in rng.sample(range(2_000), 12)}}) + "\n")


def measure(what: str, mem_mb: int, a: Path, b: Path) -> dict:
    """The child's figures, and the peaks of its anonymous and file-backed resident memory (RssAnon: heap,
    JVM and Python; RssFile: mapped files such as the index's, page cache the kernel can reclaim), read
    from outside every 0.2 s."""
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, what, str(mem_mb), str(a), str(b)],
                             stdout=subprocess.PIPE, text=True)
    peaks = {"RssAnon:": 0, "RssFile:": 0}
    while child.poll() is None:
        try:
            for line in Path(f"/proc/{child.pid}/status").read_text().splitlines():
                if line.split()[0] in peaks:
                    peaks[line.split()[0]] = max(peaks[line.split()[0]], int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
        time.sleep(0.2)
    out = child.stdout.read()
    if child.returncode:
        raise RuntimeError(f"{what} failed ({child.returncode})")
    return {**json.loads(out.strip().splitlines()[-1]), "peak_rss_anon_mb": peaks["RssAnon:"] * 1024 / 1e6,
            "peak_rss_file_mb": peaks["RssFile:"] * 1024 / 1e6, "wall_s": round(time.perf_counter() - t0, 1)}


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, nargs="*", default=[100_000, 300_000])
    p.add_argument("--queries", type=int, nargs="*", default=[1_000, 3_000])
    p.add_argument("--search-docs", type=int, default=20_000, help="documents of the index the searches run on")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_lucene_memory.json"))
    args = p.parse_args()
    from splade_rescale.retrieval.lucene import MEM_MB

    report: dict = {"index": [], "search": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for docs in args.docs:
            write_collection(tmp / f"c{docs}", docs)
            row = {"documents": docs, **measure("index", MEM_MB["impact_index"], tmp / f"c{docs}", tmp / f"i{docs}")}
            report["index"].append(row)
            print(row, flush=True)
        write_collection(tmp / "search", args.search_docs)
        measure("index", MEM_MB["impact_index"], tmp / "search", tmp / "search-index")
        for queries in args.queries:
            write_queries(tmp / f"q{queries}.jsonl", queries)
            row = measure("search", MEM_MB["impact_retrieve"], tmp / "search-index", tmp / f"q{queries}.jsonl")
            with open(tmp / f"q{queries}.jsonl.run") as run:
                row = {"queries": queries, "hits": sum(1 for _ in run), **row}
            report["search"].append(row)
            print(row, flush=True)
    for kind, x in (("index", "documents"), ("search", "hits")):
        rows = report[kind]
        if len(rows) < 2:
            continue
        a, b = fit([r[x] for r in rows], [r["peak_rss_mb"] for r in rows])
        report[f"{kind}_fit"] = {"rss_mb_at_0": round(a, 1), f"rss_bytes_per_{x[:-1]}": round(b * 1e6, 1)}
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k.endswith("_fit")}))


if __name__ == "__main__":
    main()
