"""The SLURM profiles without a cluster (dry runs; seconds). tests/workflow/test_slurm_cluster.py runs
workflow/profiles/slurm-small on a real SLURM under `make test-slurm`.

* every rule a profile names exists: a renamed rule would otherwise silently lose its
  partition, threads and memory (Snakemake ignores unknown names in set-resources);
* with ``gpus_per_job: 0`` (a cluster without GPUs) train and encode go to the gpu partition
  without a GPU request, and no job asks for more CPUs or memory than a small node has;
* ``gpus_per_job`` contradicting ``device`` stops the workflow with a message saying so.
"""

from __future__ import annotations

import re

import yaml

from conftest import REPO
from support.workflow import snakemake

PROFILES = ("workflow/profiles/slurm", "workflow/profiles/slurm-small")


def test_profiles_name_only_existing_rules():
    proc = snakemake("--list-rules", "--configfile", "config/demo.yaml")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # one rule a line: its name at the start, then its docstring's first line in parentheses (the
    # docstring's other lines are indented); words of docstrings are not rule names
    rules = {m.group(1) for m in re.finditer(r"^([A-Za-z_]\w*)(?: \(.*)?$", proc.stdout, re.M)}
    sources = "".join(p.read_text() for p in (REPO / "workflow/rules").glob("*.smk"))
    defined = re.findall(r"^(?:local)?rule (\w+):|^use rule \w+ as (\w+)", sources, re.M)
    assert rules == {a or b for a, b in defined} | {"all"}, sorted(rules)
    for profile in PROFILES:
        settings = yaml.safe_load((REPO / profile / "config.yaml").read_text())
        named = set(settings.get("set-resources", {})) | set(settings.get("set-threads", {}))
        assert named <= rules, f"{profile} names unknown rules: {sorted(named - rules)}"


def test_small_profile_on_a_cluster_without_gpus():
    proc = snakemake("results/demo/metrics/minilm/baseline/dl19-pool.json", "-n", "--forceall", "--workflow-profile",
                     "workflow/profiles/slurm-small", "--configfile", "config/demo.yaml", "--config", "gpus_per_job=0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = {m.group(1): m.group(2) for m in re.finditer(r"^rule (\w+):\n((?:[ \t]+.*\n)+)", proc.stdout, re.M)}
    model_jobs = {"train", "encode_corpus", "encode_queries"}
    assert model_jobs <= set(jobs), sorted(jobs)
    for rule, block in jobs.items():
        resources = re.search(r"resources: (.*)", block).group(1)
        threads = int(re.search(r"threads: (\d+)", block).group(1)) if "threads:" in block else 1
        assert threads <= 2 and int(re.search(r"mem_mb=(\d+)", resources).group(1)) <= 8000, (rule, block)
        partition = re.search(r"slurm_partition=(\w+)", resources).group(1)
        assert partition == ("gpu" if rule in model_jobs else "cpu"), (rule, resources)
        assert not re.search(r"\bgpu=[1-9]", resources), (rule, resources)


def test_gpus_per_job_contradicting_device_stops_the_workflow():
    proc = snakemake("-n", "--configfile", "config/demo.yaml", "--config", "device=cpu", "gpus_per_job=1")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "gpus_per_job: 1 contradicts device: cpu" in output, output[-2000:]


def test_slurm_profile_dry_run_puts_training_on_the_gpu_partition():
    proc = snakemake("all", "-n", "--forceall", "--workflow-profile", "workflow/profiles/slurm")
    assert proc.returncode == 0, proc.stderr[-2000:]
    train = proc.stdout[proc.stdout.index("rule train:"):]
    resources = train[train.index("resources:"):].splitlines()[0]
    assert "slurm_partition=gpu" in resources and "gpu=1" in resources
    assert re.search(r"\bnodes=1\b", resources)  # a train_gpus: N training's ranks share one node
    # the impact index asks for the threads and memory its rule declares, not the profile's 16 and 64 GB
    index = proc.stdout[proc.stdout.index("rule impact_index:"):]
    index = index[:index.index("\n\n")]
    threads = re.search(r"^    threads: (\d+)$", index, re.M)  # a dry run shows no line for one thread
    assert (int(threads.group(1)) if threads else 1) == 1 and "mem_mb=64000" not in index, index
    assert "figures" in proc.stdout and "tables" in proc.stdout
