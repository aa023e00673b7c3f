"""The plan predicts a CPU run: a scaled-down rehearsal's wall time and disk within +-35%.

A real run (config/rehearsal-small.yaml: random-init BERT and ModernBERT-architecture models,
3,000 recombined real passages) of one model's chain up to its impact index, plus BM25 over the
shared corpus and a query set, is measured by itself (benchmarks, ``rehearsal_data watch``) and
compared with what ``splade-rescale plan`` predicts from config/throughputs-cpu.json's ``cpu``
figures, which another run (the whole small DAG) measured. Kept to about a minute on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import REPO

from splade_rescale.calibrate import _fit, dry_run_jobs, report
from splade_rescale.rehearsal_data import build

CONFIG = "config/rehearsal-small.yaml"
TARGETS = ("results/indexes/bert-s/baseline/msmarco-like", "results/runs/bm25/dl19.trec")


def test_plan_predicts_a_scaled_down_rehearsal(tmp_path):
    for name in ("Snakefile", "workflow", "config", "resources", "envs"):
        (tmp_path / name).symlink_to(REPO / name)
    build(tmp_path / "results/rehearsal-data", passages=3_000, dev_queries=100, beir_docs=0, long_queries=0)
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "splade_rescale.rehearsal_data", "watch", "--folder", "results",
                           "--out", "results/rehearsal/disk.tsv", "--every", "1", "--", sys.executable, "-m",
                           "snakemake", *TARGETS, "--cores", "2", "--configfile", CONFIG],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"scaled-down rehearsal: {time.monotonic() - t0:.0f} s")
    assert {j["rule"] for j in dry_run_jobs(tmp_path / CONFIG, TARGETS, tmp_path)} == {
        "fetch_backbone", "rescale_head", "train", "encode_corpus", "impact_index", "bm25_index", "bm25_retrieve"}
    text, within = report(tmp_path / CONFIG, REPO / "config/throughputs-cpu.json", tmp_path / "results/rehearsal",
                          tmp_path, TARGETS)
    print(text)
    assert within, text


def test_fit_is_fixed_plus_per_unit_not_a_copy_per_job():
    assert _fit([(1, 3.0), (3, 7.0), (5, 11.0)]) == (1.0, 2.0)
    assert _fit([(2, 4.0), (2, 6.0)]) == (5.0, 0.0)  # one size: a fixed cost
    assert _fit([(1, 5.0), (2, 4.0)]) == (4.5, 0.0)  # never a negative rate
