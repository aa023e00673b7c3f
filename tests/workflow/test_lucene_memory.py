"""Lucene jobs declare the memory their JVM may take, and Snakemake never starts more of them than
``--resources mem_mb=N`` holds: without it, each JVM took the JDK's default heap (a quarter of the
machine's memory) and a 64-core server could start dozens at once. Without ``--resources mem_mb``
the machine's memory (or its cgroup's limit) holds them, and a training declares its model's.

Why ``--touch`` and not ``-n``: Snakemake's dry run skips its job selection (every ready job "runs"
at once), while ``--touch`` goes through the real selection under the given resources and runs no
command (here in an empty copy of the workflow: it only warns that there is nothing to touch).
"""

from __future__ import annotations

import math
import re

import pytest

from splade_rescale.config import host_memory_mb
from support.workflow import copy_workflow, snakemake

LUCENE_RULES = ("impact_index", "bm25_index", "impact_retrieve", "bm25_retrieve", "mine_negatives")
MEM_MB = 20_000


def rounds(log: str) -> list[tuple[int, list[dict]]]:
    """Each job selection of a verbose run: the memory free before it and the jobs it started."""
    out = []
    for part in re.split(r"^Resources before job selection: ", log, flags=re.M)[1:]:
        free = int(re.match(r"\{[^}]*'mem_mb': (\d+)", part).group(1))
        jobs = []
        for m in re.finditer(r"^(?:local)?rule (\w+):\n((?:    .*\n)+)(?:Shell command: (.*))?", part, re.M):
            mem = re.search(r"\bmem_mb=(\d+)", m.group(2))
            jobs.append({"rule": m.group(1), "mem_mb": int(mem.group(1)) if mem else 0, "shell": m.group(3) or ""})
        out.append((free, jobs))
    return out


def _selections(root, *resources: str) -> list[tuple[int, list[dict]]]:
    proc = snakemake("all", "--forceall", "--touch", "-p", "--verbose", "--cores", "64", *resources,
                     "--configfile", "config/demo.yaml", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = rounds(proc.stderr + proc.stdout)
    total = int(re.search(r"^total\s+(\d+)", proc.stderr + proc.stdout, re.M).group(1))
    assert sum(len(jobs) for _, jobs in found) == total  # every job went through a selection
    return found


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory: pytest.TempPathFactory):
    return copy_workflow(tmp_path_factory.mktemp("lucene-memory"), resources=None)


@pytest.fixture(scope="module")
def selections(workflow_copy) -> list[tuple[int, list[dict]]]:
    return _selections(workflow_copy, "--resources", f"mem_mb={MEM_MB}")


def test_lucene_jobs_declare_memory_and_their_jvm_follows_it(selections) -> None:
    lucene = [j for _, jobs in selections for j in jobs if j["rule"] in LUCENE_RULES]
    assert {j["rule"] for j in lucene} == set(LUCENE_RULES)
    for job in lucene:
        assert job["mem_mb"] >= 1000 and f"--mem-mb {job['mem_mb']} " in job["shell"], job


def test_never_more_lucene_memory_at_once_than_given(selections) -> None:
    for free, jobs in selections:
        assert free <= MEM_MB and sum(j["mem_mb"] for j in jobs) <= free, jobs
    index = [j["mem_mb"] for _, jobs in selections for j in jobs if j["rule"] == "impact_index"]
    at_once = max(sum(j["rule"] == "impact_index" for j in jobs) for _, jobs in selections)
    assert min(index) > 0 and len(index) > MEM_MB // max(index) >= at_once  # ready together, started by twos


def test_without_mem_mb_the_machines_memory_holds_the_jobs_and_a_training_declares_its_model(workflow_copy) -> None:
    found = _selections(workflow_copy)
    machine = host_memory_mb()
    assert found[0][0] == machine  # the first selection: all of it free
    for free, jobs in found:
        assert free <= machine and sum(j["mem_mb"] for j in jobs) <= free, jobs
    train = {j["mem_mb"] for _, jobs in found for j in jobs if j["rule"] == "train"}
    # MiniLM on the host: the 1 GiB floor + its fp32 weights (12 x 6 layers x 384^2 + 30,522 x 384 parameters)
    assert train == {math.ceil((2 ** 30 + 4 * (12 * 6 * 384 ** 2 + 30522 * 384)) / 1e6)}, train
