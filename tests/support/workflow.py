"""Snakemake in a subprocess, its dry-run output parsed, and the workflow copied into a test folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import yaml

from conftest import REPO
from support.training import TINY

BIN = Path(sys.executable).parent  # splade-rescale, which every rule calls, lives beside python
WITH_BIN = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
# Jobs that run models: one thread each (two pytest workers share the machine's two cores), offline.
ENV = {**WITH_BIN, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
WORKFLOW = ("Snakefile", "workflow", "config", "envs")


def snakemake(*args: str, cwd: Path = REPO, env: dict[str, str] = WITH_BIN,
              timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m snakemake ARGS`` in ``cwd`` (the repository unless a copy is named), output captured."""
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def job_counts(output: str) -> dict[str, int]:
    """The dry run's first "Job stats" table as {rule: count, "total": count}."""
    assert "Job stats:" in output, output[-3000:]
    counts = {}
    for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", output[output.index("Job stats:"):], re.M):
        counts[m.group(1)] = int(m.group(2))
        if m.group(1) == "total":
            break
    return counts


def copy_workflow(root: Path, resources: Iterable[str] | None = ()) -> Path:
    """The workflow (Snakefile, rules, configs, envs) copied into ``root``, with the named folders of
    ``resources/`` (``None``: all of it), so that a test's results and config edits stay out of the repository."""
    root.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / name)
    folders = ["."] if resources is None else list(resources)
    for name in folders:
        shutil.copytree(REPO / "resources" / name, root / "resources" / name, dirs_exist_ok=True)
    return root


# The resources a tiny_config chain reads: the probe passages (norms) and SciFact.
TINY_CHAIN_DATA = ("probe", "demo/scifact")


def tiny_config(experiment: str) -> dict:
    """The demo config on CPU with the tiny recipe, the reference backbone ``tiny`` and a 16-query
    SciFact subset; the caller sets backbones, variants and training."""
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config.update(device="cpu", experiment=experiment, recipes={"tiny": {**TINY, "source": "tests"}})
    config["published_models"] = {}  # the demo's published model has its own chain test
    config["reference_backbone"] = "tiny"
    config["datasets"] = {"scifact": {**config["datasets"]["scifact"],
                                      "subset": {"max_queries": 16, "max_judged_per_query": 3, "extra_docs": 30,
                                                 "seed": 0}}}
    return config


def run_workflow(root: Path, config: dict) -> Path:
    """``snakemake all`` in ``root`` on ``config`` (written as config/test.yaml); fails the test on error."""
    (root / "config/test.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake("all", "--cores", "2", "--configfile", "config/test.yaml", cwd=root, env=ENV, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root


def planned_jobs(output: str) -> list[dict]:
    """Each job block of a dry run: {"rule", "output": [paths], "wildcards": {name: value}}."""
    jobs = []
    for m in re.finditer(r"^(?:local)?rule (\w+):\n((?:[ \t]+.*\n?)*)", output, re.M):
        fields = dict(re.findall(r"^\s+(\w+): (.*)$", m.group(2), re.M))
        wildcards = dict(kv.split("=", 1) for kv in fields["wildcards"].split(", ")) if "wildcards" in fields else {}
        jobs.append({"rule": m.group(1), "output": fields.get("output", "").split(", "), "wildcards": wildcards})
    return jobs
