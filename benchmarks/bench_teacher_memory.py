"""Peak memory and load time of the distillation teacher scores (``qid<TAB>docid<TAB>score``).

The claim under test: ``splade_rescale.training.data.load_teacher_scores`` holds a full MS MARCO
teacher file in ~20 bytes per pair (sorted fixed-width key bytes + float32 scores, looked up
by bisection), where the previous loader (a dict keyed by (qid, docid) tuples, reproduced
below as ``dict``) needed ~250 bytes per pair in every training process.

1. Writes a SYNTHETIC teacher file of ``--lines`` pairs (default 5M): 10 distinct passages per
   query, MS MARCO-like ids (qid < 1.2M, docid < 8.8M, both random), scores with 4 decimals.
2. Loads it in a fresh subprocess per loader and reports that process's RSS after imports and
   after loading (what training then holds), its peak RSS (``VmHWM``: the arrays loader peaks
   while sorting, with the argsort index and a sorted copy) and the load time; the ``arrays``
   run also checks 100k lookups against the file's scores (as float32) and that a missing pair
   raises KeyError.

    python benchmarks/bench_teacher_memory.py               # 5M lines, both loaders, ~35 s on 2 cores
    python benchmarks/bench_teacher_memory.py --lines 1000000 --keep /tmp/teacher.tsv

Run with the package importable (``PYTHONPATH=src``). Figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

DRIVER = r"""
import json, sys, time

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # MiB

def dict_loader(path):  # the loader before the arrays (splade_rescale at 326db57)
    scores = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if len(parts) != 3:
                raise ValueError(f"{path}:{lineno}")
            scores[(parts[0], parts[1])] = float(parts[2])
    return scores

import numpy as np
from splade_rescale.training.data import load_teacher_scores

kind, path = sys.argv[1], sys.argv[2]
before = status("VmRSS")
t0 = time.perf_counter()
teacher = dict_loader(path) if kind == "dict" else load_teacher_scores(path)
load_s = time.perf_counter() - t0
held, peak = status("VmRSS"), status("VmHWM")
checked = 0
if kind == "arrays":
    with open(path) as fh:
        for _, line in zip(range(100_000), fh):
            qid, docid, score = line.split()
            assert teacher[(qid, docid)] == float(np.float32(score)), (qid, docid)
            checked += 1
    try:
        teacher[("no-such-query", "0")]
        raise AssertionError("a missing pair was found")
    except KeyError:
        pass
print(json.dumps({"loader": kind, "pairs": len(teacher), "rss_after_imports_mib": round(before, 1),
                  "rss_after_load_mib": round(held, 1),
                  "peak_rss_mib": round(peak, 1), "load_s": round(load_s, 2), "lookups_checked": checked}))
"""


def write_teacher_file(path: Path, lines: int, seed: int = 0) -> None:
    """10 distinct random passages per query (so no pair repeats), queries in random order of ids."""
    rng = random.Random(seed)
    qids = rng.sample(range(1_200_000), -(-lines // 10))
    with open(path, "w") as fh:
        for start in range(0, lines, 10):
            qid = qids[start // 10]
            fh.write("".join(f"{qid}\t{docid}\t{rng.uniform(-10, 20):.4f}\n"
                             for docid in rng.sample(range(8_841_823), min(10, lines - start))))


def measure(kind: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", DRIVER, kind, str(path)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=5_000_000)
    p.add_argument("--loaders", nargs="+", default=["dict", "arrays"], choices=["dict", "arrays"])
    p.add_argument("--keep", type=Path, help="write the teacher file here and keep it (default: a temporary file)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = a.keep or Path(tmp) / "teacher.tsv"
        write_teacher_file(path, a.lines)
        size_mib = path.stat().st_size / 2**20
        rows = [measure(kind, path) for kind in a.loaders]
    print(f"teacher file: {a.lines:,} lines, {size_mib:.0f} MiB\n")
    print("| loader | pairs | RSS after imports (MiB) | RSS after load (MiB) | peak RSS (MiB) | load (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['loader']} | {r['pairs']:,} | {r['rss_after_imports_mib']} | {r['rss_after_load_mib']} "
              f"| {r['peak_rss_mib']} | {r['load_s']} |")
    print("\n" + json.dumps(rows))


if __name__ == "__main__":
    main()
