"""The plan predicts a CPU run it has not seen: calibrated on one scaled-down rehearsal, it
predicts the wall time and disk of a run over a corpus three times larger within +-35%.

Both runs are real (config/rehearsal-small.yaml: random-init BERT and ModernBERT-architecture
models, recombined real passages; model chains up to the impact index, plus BM25 over the shared
corpus and a query set), measured by themselves (Snakemake benchmarks, ``rehearsal_data watch``),
on the same machine under the same load, so the check does not depend on how fast the machine is
(only on its speed staying put between the two runs: see the test's two attempts).
The calibration run has both models, so that each model rule is fitted as fixed + per-unit
seconds over two sizes (token-parameters) rather than copied; the predicted run has one model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from splade_rescale.costs.calibrate import _fit, calibrate, dry_run_jobs, report
from splade_rescale.costs.inputs import load_throughputs
from splade_rescale.data.fixtures.rehearsal import build

CONFIG = "config/rehearsal-small.yaml"
RESULTS = "results/rehearsal-small"  # the config's experiment folder
TARGETS = (f"{RESULTS}/indexes/bert-s/baseline/msmarco-like", f"{RESULTS}/runs/bm25/dl19.trec")
CALIBRATION_TARGETS = (*TARGETS, f"{RESULTS}/indexes/modernbert-s/baseline/msmarco-like")


def _rehearse(folder: Path, passages: int, targets: tuple[str, ...]) -> float:
    """Build the data and run the targets under the disk watcher; return the wall seconds."""
    folder.mkdir()
    for name in ("Snakefile", "workflow", "config", "resources", "envs"):
        (folder / name).symlink_to(REPO / name)
    build(folder / "results/rehearsal-data", passages=passages, dev_queries=100, beir_docs=0, long_queries=0)
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "splade_rescale.data.fixtures.rehearsal", "watch",
                           "--folder", RESULTS,
                           "--out", f"{RESULTS}/disk.tsv", "--every", "1", "--", sys.executable, "-m",
                           "snakemake", *targets, "--cores", "2", "--configfile", CONFIG],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return time.monotonic() - t0


def _calibrate_then_predict(folder: Path) -> tuple[str, bool]:
    """One calibration run, one predicted run; the plan's report on the second from the first's figures."""
    folder.mkdir()
    small, large = folder / "small", folder / "large"
    print(f"calibration run (1,000 passages, 2 models): {_rehearse(small, 1_000, CALIBRATION_TARGETS):.0f} s")
    throughputs = load_throughputs()  # no `cpu` section: every figure of the prediction comes from the small run
    throughputs["cpu"] = calibrate(small / CONFIG, small, CALIBRATION_TARGETS, throughputs)
    (folder / "throughputs.json").write_text(json.dumps(throughputs))
    print(f"predicted run (3,000 passages, 1 model): {_rehearse(large, 3_000, TARGETS):.0f} s")
    threads = {j["rule"]: j["threads"] for j in dry_run_jobs(large / CONFIG, TARGETS, large)}
    assert set(threads) == {
        "fetch_backbone", "rescale_head", "train", "judge_training", "encode_corpus", "impact_index", "bm25_index",
        "bm25_retrieve", "prepare_corpus",
        "prepare_training_data"}  # data preparation: the corpus counted, the examples made local
    # declared threads, not scaled down by the dry run: a schedule with 1-thread trainings ran them side by side
    assert threads["train"] == threads["encode_corpus"] == 2 and threads["fetch_backbone"] == 1
    text, within = report(large / CONFIG, folder / "throughputs.json", large / RESULTS, large, TARGETS)
    print(text)
    return text, within


@pytest.mark.serial
def test_plan_calibrated_on_one_run_predicts_a_larger_one(tmp_path):
    """Within +-35% in one of two attempts: this shared 2-core machine's speed drifts by tens of
    percent within minutes (the same evaluate job took 7.5 s and 10.5 s a few minutes apart), and
    a drift between the calibration run and the predicted one is not the plan's error. Each attempt
    is a fresh pair of runs, so a miss from drift does not carry over."""
    reports = []
    for attempt in (1, 2):
        text, within = _calibrate_then_predict(tmp_path / f"attempt-{attempt}")
        reports.append(text)
        if within:
            return
    raise AssertionError("\n\n".join(reports))


def test_fit_is_fixed_plus_per_unit_not_a_copy_per_job():
    assert _fit([(1, 3.0), (3, 7.0), (5, 11.0)]) == (1.0, 2.0)
    assert _fit([(2, 4.0), (2, 6.0)]) == (5.0, 0.0)  # one size: a fixed cost
    assert _fit([(1, 5.0), (2, 4.0)]) == (4.5, 0.0)  # never a negative rate
