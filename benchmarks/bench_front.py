"""Time the data-preparation front of an MS MARCO training run with ir_datasets' own code.

What the jobs before the first ``train`` do (rules prepare_corpus, prepare_training_source,
prepare_training_data), on files planted where ir_datasets looks before it downloads, in a
temporary ``$IR_DATASETS_HOME``:

* ``msmarco-passage/collectionandqueries.tar.gz`` (``collection.tsv``) and ``queries.tar.gz``
  (``queries.train.tsv``): ir_datasets uses a file at a download's ``cache_path`` as it is;
* the triples tar (``triples.train.small.tsv``) at ``downloads/<md5>``, the local copy ir_datasets
  reads before any mirror. Its ``expected_md5`` is set to the planted file's (the real one would
  refuse it); nothing else of ir_datasets is changed.

SYNTHETIC SCALING OF REAL TEXTS: the passages are the 28,606 real MS MARCO passages of
``msmarco-dl19-dl20-pool`` (raw collection encoding, mojibake included), repeated with `` <k>``
appended to the k-th copy's text so that each is unique (ir_datasets asserts unique hashes); the
training queries are the real ASCII dev-subset, DL19 and DL20 queries (and the triples sample's),
repeated the same way; a triple pairs query ``i % queries`` with two passages drawn at random.
Download time is not measured (the files are local).

Timed: the docs store build of ``prepare_corpus`` (tar extraction, ``FixEncoding``, lz4 store) and
its duplicate-id pass (docs/s); each step of ir_datasets' ``MapSmallTriplesQidPid`` (hashing the
raw collection, the train queries, mapping the triples; through its progress bars); the examples
of one stream written. Twice: ``now`` (the source job keeps the download; the examples job maps
only the triples it reads) and ``before`` (every triple mapped into ir_datasets' pair cache, the
examples then read from it); the two examples files must be equal (``examples_identical``).
The report is printed as JSON; ``--out`` writes it too.

    .venv/bin/python benchmarks/bench_front.py --out benchmarks/results/bench_front.json
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import platform
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

DEMO = Path(__file__).resolve().parents[1] / "resources" / "demo"


def matmul_gflops() -> float:
    """1-thread fp32 matmul speed (the machine's drift figure)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(1024, 1024)
    a @ a
    t0 = time.perf_counter()
    for _ in range(10):
        a @ a
    torch.set_num_threads(threads)
    return round(10 * 2 * 1024 ** 3 / (time.perf_counter() - t0) / 1e9, 1)


def _tar_gz(path: Path, member: str, lines) -> None:
    """A .tar.gz holding one file ``member`` made of ``lines`` (bytes)."""
    data = b"".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _real_passages(data: Path) -> list[str]:
    with gzip.open(data / "msmarco-dl19-dl20-pool" / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        return list(dict.fromkeys(" ".join(json.loads(line)["text"].split()) for line in fh))


def _real_queries(data: Path) -> list[str]:
    pool = data / "msmarco-dl19-dl20-pool"
    texts = [line.split("\t", 1)[1].strip() for f in ("queries.dl19.tsv", "queries.dl20.tsv")
             for line in (pool / f).read_text(encoding="utf-8").splitlines()]
    texts += [line.split("\t")[0] for line in (data / "msmarco-triples-sample" / "triples.tsv").read_text(
        encoding="utf-8").splitlines()]
    return list(dict.fromkeys(t for t in texts if t.isascii() and t))


def plant(home: Path, data: Path, docs: int, queries: int, triples: int, seed: int = 0) -> Path:
    """Plant a scaled MS MARCO in ``home``; returns the triples tar (whose md5 the caller sets)."""
    base = home / "msmarco-passage"
    real_p, real_q = _real_passages(data), _real_queries(data)
    scaled = lambda texts, i: texts[i % len(texts)] + (f" {i // len(texts)}" if i >= len(texts) else "")  # noqa: E731
    passages = [scaled(real_p, i) for i in range(docs)]
    _tar_gz(base / "collectionandqueries.tar.gz", "collection.tsv",
            (f"{i}\t{t}\n".encode() for i, t in enumerate(passages)))
    qtexts = [scaled(real_q, i) for i in range(queries)]
    _tar_gz(base / "queries.tar.gz", "queries.train.tsv", (f"{i}\t{t}\n".encode() for i, t in enumerate(qtexts)))
    rng = random.Random(seed)
    tar = home / "downloads" / "triples.train.small.tar.gz"
    _tar_gz(tar, "triples.train.small.tsv", (f"{qtexts[i % queries]}\t{passages[rng.randrange(docs)]}\t"
                                             f"{passages[rng.randrange(docs)]}\n".encode() for i in range(triples)))
    return tar


CHILD = r'''
import hashlib, json, shutil, sys, time
from pathlib import Path
import ir_datasets
from ir_datasets.datasets import msmarco_passage
from splade_rescale.data.prepare import _irds_docs_count, unique_ids
from splade_rescale.training.data import prepare_examples, prepare_training_source

home, tar, n_examples, buffer = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
steps = []
pbar = msmarco_passage._logger.pbar
def timed_pbar(it, desc=None, **kw):  # ir_datasets' progress bar over each step, timed (also when stopped early)
    t0, n = time.perf_counter(), 0
    try:
        for n, x in enumerate(pbar(it, desc=desc, **kw), 1):
            yield x
    finally:
        steps.append({"step": desc.split(" (")[0], "items": n, "seconds": round(time.perf_counter() - t0, 3)})
msmarco_passage._logger.pbar = timed_pbar

spec = {"source": "ir_datasets", "id": "msmarco-passage/train/triples-small"}
dataset = ir_datasets.load(spec["id"])
cache = dataset.docpairs_handler()._dlc
download = cache._streamer._streamer._streamer  # Cache > MapSmallTriplesQidPid > TarExtract > Download
download.expected_md5 = hashlib.md5(tar.read_bytes()).hexdigest()
local = download.mirrors[0]._path  # downloads/<the real md5>: the local copy ir_datasets reads first
local.parent.mkdir(parents=True, exist_ok=True)
shutil.copyfile(tar, local)
out = {}
def timed(key, f, *args):
    t0 = time.perf_counter(); r = f(*args); out[key] = round(time.perf_counter() - t0, 3); return r
docs = timed("docs_store_s", _irds_docs_count, "msmarco-passage")
timed("unique_ids_s", unique_ids, {"source": "ir_datasets", "id": "msmarco-passage"})
stream = {"seed": 42, "shuffle_buffer": buffer, "teacher_scores": None, "examples": n_examples}
# now: the source job keeps the download, the examples job maps the first triples only
timed("now_training_source_s", prepare_training_source, spec, home / "source.json")
timed("now_examples_s", prepare_examples, spec, stream, home / "now.jsonl")
out["now_steps"], steps = steps, []
# before: the first doc pair maps every triple into ir_datasets' Cache; the examples are read from it
timed("before_training_source_s", lambda: next(iter(dataset.docpairs_iter())))
out["before_steps"], steps = steps, []
timed("before_examples_s", prepare_examples, spec, stream, home / "before.jsonl")
out["identical"] = (home / "now.jsonl").read_bytes() == (home / "before.jsonl").read_bytes()
out["docs"] = docs
print("RESULT " + json.dumps(out))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=300_000)
    ap.add_argument("--queries", type=int, default=30_000)
    ap.add_argument("--triples", type=int, default=1_000_000)
    ap.add_argument("--examples", type=int, default=90_000)
    ap.add_argument("--shuffle-buffer", type=int, default=10_000)
    ap.add_argument("--data", type=Path, default=DEMO, help="the real MS MARCO texts (resources/demo)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    gflops = [matmul_gflops()]
    with tempfile.TemporaryDirectory(prefix="bench_front-") as tmp:
        home = Path(tmp)
        t0 = time.perf_counter()
        tar = plant(home, args.data, args.docs, args.queries, args.triples)
        print(f"planted in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        env = {**os.environ, "IR_DATASETS_HOME": str(home), "IR_DATASETS_SKIP_DISK_FREE": "true",
               "OMP_NUM_THREADS": "1"}
        child = subprocess.run([sys.executable, "-c", CHILD, str(home), str(tar), str(args.examples),
                                str(args.shuffle_buffer)], env=env, capture_output=True, text=True)
        if child.returncode:
            sys.exit(child.stderr[-3000:])
        res = json.loads(next(line for line in child.stdout.splitlines() if line.startswith("RESULT "))[7:])
        sizes = {p.name: p.stat().st_size for p in [tar, *(home / "msmarco-passage").glob("*.tar.gz")]}
    gflops.append(matmul_gflops())
    rate = lambda items, s: round(items / max(s, 1e-9))  # noqa: E731
    per_step = lambda steps: {x["step"]: x | {"per_s": rate(x["items"], x["seconds"])} for x in steps}  # noqa: E731
    report = {
        "what": "ir_datasets' own MS MARCO preparation on planted files: SYNTHETIC SCALING OF REAL TEXTS "
                "(real pool passages and real queries, repeated with a copy number appended; see the docstring)",
        "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "matmul_gflops_1thread": gflops, "python": platform.python_version(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "sizes": {"docs": args.docs, "queries": args.queries, "triples": args.triples, "examples": args.examples,
                  "shuffle_buffer": args.shuffle_buffer, "planted_bytes": sizes},
        "prepare_corpus": {"docs_store_s": res["docs_store_s"], "unique_ids_s": res["unique_ids_s"],
                           "docs_per_s": rate(args.docs, res["docs_store_s"] + res["unique_ids_s"])},
        "before": {"training_source_s": res["before_training_source_s"], "steps": per_step(res["before_steps"]),
                   "examples_s": res["before_examples_s"],
                   "examples_per_s": rate(args.examples, res["before_examples_s"])},
        "now": {"training_source_s": res["now_training_source_s"], "examples_s": res["now_examples_s"],
                "steps": per_step(res["now_steps"])},
        "examples_identical": res["identical"],
    }
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
