"""The plan predicts a CPU run it has not seen: fitted to one scaled-down rehearsal, it
predicts the wall time and disk of a run over a corpus three times larger within +-35%.

Both runs are real (config/rehearsal-small.yaml: random-init BERT and ModernBERT-architecture
models, recombined real passages; model chains up to the impact index, plus BM25 over the shared
corpus and a query set), measured by themselves (Snakemake benchmarks, ``rehearsal_data watch``),
on the same machine under the same load, so the check does not depend on how fast the machine is
(only on its speed staying put between the two runs: see the test's two attempts). The fit
reads those measurements; the verdict on the predicted run does not: the test judges the prediction
against its own stopwatch around the run and its own samples of the results folder's bytes.
The fitted run has both models, so that each model rule is fitted as fixed + per-unit
seconds over two sizes (token-parameters) rather than copied; the predicted run has one model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO
from splade_rescale.costs.fit_throughputs import _fit, dry_run_jobs, fit_throughputs, report
from splade_rescale.costs.inputs import load_throughputs
from splade_rescale.data.fixtures.rehearsal import build

CONFIG = "config/rehearsal-small.yaml"
RESULTS = "results/rehearsal-small"  # the config's experiment folder
TARGETS = (f"{RESULTS}/indexes/bert-s/baseline/msmarco-like", f"{RESULTS}/runs/bm25/dl19.trec")
FIT_TARGETS = (*TARGETS, f"{RESULTS}/indexes/modernbert-s/baseline/msmarco-like")
TOLERANCE = 0.35  # the acceptance of a rehearsal's prediction (docs/costs.md): within +-35% of the measured run


def _folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (0 before it exists); files removed during the walk are skipped."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


def _run_bytes(results: Path) -> int:
    """The results folder's bytes without the watcher's own record (disk.tsv, written once the run is over)."""
    record = results / "disk.tsv"
    return _folder_bytes(results) - (record.stat().st_size if record.is_file() else 0)


def _rehearse(folder: Path, passages: int, targets: tuple[str, ...]) -> dict[str, float]:
    """Build the data and run the targets under the disk watcher (which the fit reads).

    Returns the test's own measurements of the run: wall seconds by its stopwatch around the run,
    peak and final bytes of the results folder by its own samples (every second, like the watcher's;
    the final one after the run, the watcher's disk.tsv left out)."""
    folder.mkdir()
    for name in ("Snakefile", "workflow", "config", "resources", "envs"):
        (folder / name).symlink_to(REPO / name)
    build(folder / "results/rehearsal-data", passages=passages, dev_queries=100, beir_docs=0, long_queries=0)
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    results = folder / RESULTS
    samples = [_run_bytes(results)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            samples.append(_run_bytes(results))

    sampler = threading.Thread(target=sample, daemon=True)
    t0 = time.monotonic()
    sampler.start()
    proc = subprocess.run([sys.executable, "-m", "splade_rescale.data.fixtures.rehearsal", "watch",
                           "--folder", RESULTS,
                           "--out", f"{RESULTS}/disk.tsv", "--every", "1", "--", sys.executable, "-m",
                           "snakemake", *targets, "--cores", "2", "--configfile", CONFIG],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    wall_s = time.monotonic() - t0  # includes the watcher's start: the run as a user waits for it
    done.set()
    sampler.join()
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = _run_bytes(results)
    return {"wall_s": wall_s, "peak_bytes": max(samples + [final]), "final_bytes": final}


def _judge(predicted: dict[str, float], own: dict[str, float]) -> tuple[str, bool]:
    """The prediction against the test's own measurements: a table, and whether all are within TOLERANCE."""
    lines = ["| figure | predicted | measured by the test | deviation |", "|---|---|---|---|"]
    within = True
    for key in ("wall_s", "peak_bytes", "final_bytes"):
        p, x = float(predicted[key]), float(own[key])
        ok = abs(p - x) <= TOLERANCE * x
        within &= ok
        lines.append(f"| {key} | {p:,.0f} | {x:,.0f} | {(p - x) / x:+.0%}{'' if ok else ' (out)'} |")
    return "\n".join(lines), within


def _fit_then_predict(folder: Path) -> tuple[str, bool]:
    """One fitted run, one predicted run; the plan's prediction of the second from the first's figures,
    judged against the test's own measurements of the second."""
    folder.mkdir()
    small, large = folder / "small", folder / "large"
    print(f"fitted run (1,000 passages, 2 models): {_rehearse(small, 1_000, FIT_TARGETS)['wall_s']:.0f} s")
    throughputs = load_throughputs()  # no `cpu` section: every figure of the prediction comes from the small run
    throughputs["cpu"] = fit_throughputs(small / CONFIG, small, FIT_TARGETS, throughputs)
    (folder / "throughputs.json").write_text(json.dumps(throughputs))
    own = _rehearse(large, 3_000, TARGETS)
    print(f"predicted run (3,000 passages, 1 model): {own['wall_s']:.0f} s")
    threads = {j["rule"]: j["threads"] for j in dry_run_jobs(large / CONFIG, TARGETS, large)}
    assert set(threads) == {
        "fetch_backbone", "rescale_head", "train", "judge_training", "encode_corpus", "impact_index", "bm25_index",
        "bm25_retrieve", "prepare_corpus",
        "prepare_training_data",  # data preparation: the corpus counted, the examples made local
        "settings"}  # the settings records its stages read (workflow/rules/settings.smk), local one-line writes
    # declared threads, not scaled down by the dry run: a schedule with 1-thread trainings ran them side by side
    assert threads["train"] == threads["encode_corpus"] == 2 and threads["fetch_backbone"] == 1
    text, _ = report(large / CONFIG, folder / "throughputs.json", large / RESULTS, large, TARGETS)
    predicted = json.loads((large / RESULTS / "measured.json").read_text())["predicted"]
    judged, within = _judge(predicted, own)
    text = f"{text}\n## Judged by the test (its stopwatch and disk samples), within +-{TOLERANCE:.0%}\n\n{judged}\n"
    print(text)
    return text, within


@pytest.mark.serial
def test_plan_fitted_to_one_run_predicts_a_larger_one(tmp_path):
    """Within +-35% in one of two attempts: this shared 2-core machine's speed drifts by tens of
    percent within minutes (one evaluate job's time varied by 40% a few minutes apart), and
    a drift between the fitted run and the predicted one is not the plan's error. Each attempt
    is a fresh pair of runs, so a miss from drift does not carry over."""
    reports = []
    for attempt in (1, 2):
        text, within = _fit_then_predict(tmp_path / f"attempt-{attempt}")
        reports.append(text)
        if within:
            return
    raise AssertionError("\n\n".join(reports))


def test_the_verdict_is_plus_minus_35_percent_of_the_tests_own_measurement():
    own = {"wall_s": 100.0, "peak_bytes": 1_000.0, "final_bytes": 800.0}
    assert _judge({"wall_s": 135.0, "peak_bytes": 650.0, "final_bytes": 800.0}, own)[1]  # +35%, -35%, 0
    assert not _judge({"wall_s": 136.0, "peak_bytes": 1_000.0, "final_bytes": 800.0}, own)[1]
    assert not _judge({"wall_s": 100.0, "peak_bytes": 640.0, "final_bytes": 800.0}, own)[1]
    assert not _judge({"wall_s": 100.0, "peak_bytes": 1_000.0, "final_bytes": 1_090.0}, own)[1]  # +36.25%
    assert "| wall_s | 136 | 100 | +36% (out) |" in _judge({**own, "wall_s": 136.0}, own)[0]


def test_the_tests_disk_count_is_the_files_bytes(tmp_path):
    assert _folder_bytes(tmp_path / "absent") == 0
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / "a/x.bin").write_bytes(b"0" * 300)
    (tmp_path / "a/b/y.bin").write_bytes(b"0" * 45)
    assert _folder_bytes(tmp_path / "a") == 345


def test_fit_is_fixed_plus_per_unit_not_a_copy_per_job():
    assert _fit([(1, 3.0), (3, 7.0), (5, 11.0)]) == (1.0, 2.0)
    assert _fit([(2, 4.0), (2, 6.0)]) == (5.0, 0.0)  # one size: a fixed cost
    assert _fit([(1, 5.0), (2, 4.0)]) == (4.5, 0.0)  # never a negative rate
