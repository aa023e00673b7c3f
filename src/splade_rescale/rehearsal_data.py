"""Evaluation data for the scale rehearsal (config/rehearsal.yaml), built from the demo's real text.

The paper evaluates on one 8.8M-passage corpus shared by three query sets (MS MARCO dev, DL19,
DL20) and on BEIR sets, one with long queries (ArguAna). The rehearsal keeps that structure at a
size a CPU can hold, from ``resources/demo/`` only, deterministically (seeded):

* ``msmarco-like/``: every real passage of the DL19/DL20 pool and of SciFact, then passages made
  by joining two real sentences drawn from that pool, up to ``--passages`` (200,000 by default);
  query sets: the real DL19 and DL20 queries with their real in-pool qrels, and ``dev`` pseudo
  queries (the first words of a sampled real passage, that passage judged relevant);
* ``scifact-like/``: SciFact's real test queries and qrels over SciFact plus recombined distractors;
* ``arguana-like/``: long queries (the first half of a real SciFact abstract) whose relevant document
  is the abstract's second half, over those halves plus distractors.

``python -m splade_rescale.rehearsal_data --out results/rehearsal-data`` writes them (tens of MB,
not committed). ``watch`` runs a command while sampling the disk use of a folder (peak disk of a run).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from splade_rescale.datasets import _iter_jsonl_corpus, _read_jsonl_queries

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "resources" / "demo"
POOL = DEMO / "msmarco-dl19-dl20-pool"
SCIFACT = DEMO / "scifact"
ARGUANA_QUERIES = 1_406  # BEIR ArguAna's query count
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _sentences(texts: list[str]) -> list[str]:
    return [s for t in texts for s in _SENTENCE.split(t) if len(s.split()) >= 4]


def _write_corpus(path: Path, docs: list[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        for docid, text in docs:
            f.write((json.dumps({"_id": docid, "title": "", "text": text}) + "\n").encode())


def _write_beir(folder: Path, docs: list[tuple[str, str]], queries: dict[str, str], qrels: dict[str, str]) -> None:
    _write_corpus(folder / "corpus.jsonl.gz", docs)
    with open(folder / "queries.jsonl", "w") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t1\n" for q, d in qrels.items())


def _recombined(sentences: list[str], n: int, rng: random.Random, prefix: str) -> list[tuple[str, str]]:
    return [(f"{prefix}{i}", f"{rng.choice(sentences)} {rng.choice(sentences)}") for i in range(n)]


def build(out: str | Path, passages: int = 200_000, dev_queries: int = 1_000, beir_docs: int = 20_000,
          long_queries: int = ARGUANA_QUERIES, seed: int = 0) -> dict[str, int]:
    """Write the three collections under ``out``; return their document and query counts.

    Below the real passages' count (a scaled-down rehearsal) the corpus is their first ``passages``:
    DL qrels of documents left out then point outside the corpus, which only lowers recall.
    """
    out = Path(out)
    rng = random.Random(seed)
    pool = list(_iter_jsonl_corpus(POOL / "corpus.jsonl.gz"))
    scifact = list(_iter_jsonl_corpus(SCIFACT / "corpus.jsonl.gz"))
    real = pool + [(f"sf{d}", t) for d, t in scifact]
    sentences = _sentences([t for _, t in real])
    docs = real[:passages] + _recombined(sentences, passages - len(real), rng, "rx")
    msmarco = out / "msmarco-like"
    _write_corpus(msmarco / "corpus.jsonl.gz", docs)
    for year in ("dl19", "dl20"):
        shutil.copy(POOL / f"queries.{year}.tsv", msmarco / f"queries.{year}.tsv")
        shutil.copy(POOL / "qrels" / f"qrels.{year}-passage.in-pool.txt", msmarco / f"qrels.{year}.txt")
    picked = rng.sample(range(len(docs)), dev_queries)
    with open(msmarco / "queries.dev.tsv", "w") as q, open(msmarco / "qrels.dev.txt", "w") as r:
        for i in picked:
            docid, text = docs[i]
            q.write(f"dev{i}\t{' '.join(text.split()[:6])}\n")
            r.write(f"dev{i} 0 {docid} 1\n")

    sf_sentences = _sentences([t for _, t in scifact])
    _write_beir(out / "scifact-like", [(d, t) for d, t in scifact]
                + _recombined(sf_sentences, beir_docs - len(scifact), rng, "sx"),
                _read_jsonl_queries(SCIFACT / "queries.jsonl"), {})
    shutil.copy(SCIFACT / "qrels" / "test.tsv", out / "scifact-like" / "qrels" / "test.tsv")

    long_docs = [(d, t.split()) for d, t in scifact if len(t.split()) >= 200]
    long_docs = sorted(rng.sample(long_docs, min(long_queries, len(long_docs))))
    halves = {f"a{d}": (" ".join(w[:len(w) // 2]), " ".join(w[len(w) // 2:])) for d, w in long_docs}
    _write_beir(out / "arguana-like", [(f"{q}-reply", h[1]) for q, h in halves.items()]
                + _recombined(sf_sentences, max(0, beir_docs // 2 - len(halves)), rng, "ax"),
                {q: h[0] for q, h in halves.items()}, {q: f"{q}-reply" for q in halves})
    return {"msmarco_passages": len(docs), "dev_queries": dev_queries, "scifact_docs": beir_docs,
            "arguana_queries": len(halves), "arguana_docs": max(len(halves), beir_docs // 2)}


def disk_bytes(path: Path) -> int:
    """Bytes under ``path``: a file's size, a folder's files summed, 0 when absent."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def watch(command: list[str], folder: str | Path, out: str | Path, every: float = 5.0) -> int:
    """Run ``command``, sampling the bytes under ``folder``; write the samples and the peak to ``out``."""
    folder, out = Path(folder), Path(out)
    samples: list[tuple[float, int]] = []
    done = threading.Event()
    start = time.time()

    def sample() -> None:
        while not done.is_set():
            try:
                samples.append((time.time() - start, disk_bytes(folder)))
            except FileNotFoundError:  # a file deleted while walking; the next sample sees the rest
                pass
            done.wait(every)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    rc = subprocess.call(command)
    done.set()
    thread.join()
    samples.append((time.time() - start, disk_bytes(folder)))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        f.write(f"# command: {' '.join(command)}\n# exit status: {rc}\n# wall s: {samples[-1][0]:.0f}\n"
                f"# peak bytes: {max(b for _, b in samples)}\n# final bytes: {samples[-1][1]}\nseconds\tbytes\n")
        f.writelines(f"{t:.0f}\t{b}\n" for t, b in samples)
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m splade_rescale.rehearsal_data", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write the rehearsal's evaluation data")
    b.add_argument("--out", default="results/rehearsal-data")
    b.add_argument("--passages", type=int, default=200_000)
    b.add_argument("--dev-queries", type=int, default=1_000)
    b.add_argument("--beir-docs", type=int, default=20_000, help="SciFact-like documents (ArguAna-like: half)")
    b.add_argument("--long-queries", type=int, default=ARGUANA_QUERIES, help="ArguAna-like queries")
    w = sub.add_parser("watch", help="run a command, recording the peak disk use of a folder")
    w.add_argument("--folder", default="results")
    w.add_argument("--out", default="results/rehearsal/disk.tsv")
    w.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    w.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        print(json.dumps(build(args.out, args.passages, args.dev_queries, args.beir_docs, args.long_queries)))
        return 0
    return watch([c for c in args.command if c != "--"], args.folder, args.out, args.every)


if __name__ == "__main__":
    sys.exit(main())
