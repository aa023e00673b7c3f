"""The Snakemake workflow: the paper's DAG, lint, and config errors before any job runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def job_counts(output: str) -> dict[str, int]:
    table = output[output.index("Job stats:"):]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_paper_dry_run_shows_the_whole_experiment():
    proc = snakemake("all", "-n", "--cores", "8")
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = job_counts(proc.stdout)
    backbones, variants, datasets = 9, 2, 16
    assert counts["fetch_backbone"] == backbones
    assert counts["norms_backbone"] == backbones
    assert counts["rescale_head"] == backbones * variants
    assert counts["norms_variant"] == backbones * variants
    assert counts["train"] == backbones * variants
    for rule in ("encode", "impact_index", "impact_retrieve", "evaluate"):
        assert counts[rule] == backbones * variants * datasets, rule
    for rule in ("bm25_index", "bm25_retrieve", "evaluate_bm25"):
        assert counts[rule] == datasets, rule
    assert counts["tables"] == 1


def test_lint_is_clean():
    proc = snakemake("--lint")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_bad_config_stops_before_any_job(tmp_path):
    text = (REPO / "config/demo.yaml").read_text().replace("factor: 1/16", "factor: 0")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    proc = snakemake("all", "-n", "--cores", "1", "--configfile", str(bad))
    assert proc.returncode != 0
    assert "variants.rescaled.factor = 0" in proc.stderr + proc.stdout
    assert "bad.yaml" in proc.stderr + proc.stdout
