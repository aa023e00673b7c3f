"""The plan on a machine of ``cores`` cores and ``gpus`` GPUs: the dry run's jobs, timed by the bill.

Why: a GPU run's cost is its wall time, and that depends on whether the GPUs keep working while
Lucene jobs hold the cores. The jobs, their threads and their ``gpu`` requests are those of
``snakemake all -n --forceall --cores C --resources gpu=G`` (the workflow's own
``config.local_threads`` and ``config.gpus_per_job``; a backbone's ``train_gpus``), so the plan and
the run agree. Snakemake starts a ready job only when its threads (capped at ``--cores``) and its
``gpu`` resource are free; :func:`list_schedule` keeps the same constraints (the ready job with the
longest remaining path first, higher priorities before). Snakemake's own choice among ready jobs
(an ILP over priorities and resources) differs in order, not in the constraints.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from splade_rescale.config import ConfigError, gpus_per_job, load_config, local_threads
from splade_rescale.costs.plan import (
    MEASURED_NAME,
    THROUGHPUTS_PATH,
    build_plan,
    host_at_once,
    load_throughputs,
    models,
    render_bill,
    take_measured,
)
from splade_rescale.data.corpora import part_range
from splade_rescale.runs import PUBLISHED_RUN
from splade_rescale.training.data import run_stream, stream_name
from splade_rescale.training.recipes import resolve_recipe

REPO = THROUGHPUTS_PATH.parents[1]


def dry_run_jobs(configfile: str | Path, cores: int, gpus: int, workdir: str | Path = ".",
                 remaining: bool = False) -> list[dict]:
    """Jobs of ``snakemake all -n --forceall --cores C --resources gpu=G`` (``remaining``: without
    ``--forceall``, the jobs still to run beside the results there): rule, wildcards, threads, GPUs,
    priority and the ids of the jobs each waits for."""
    proc = subprocess.run([sys.executable, "-m", "snakemake", "all", "-n", *([] if remaining else ["--forceall"]),
                           "--cores", str(cores),
                           "--resources", f"gpu={gpus}", "--configfile", str(Path(configfile).resolve()),
                           "--snakefile", str(REPO / "Snakefile")],
                          cwd=workdir, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise ConfigError(f"snakemake dry run of {configfile} failed: {proc.stderr.strip().splitlines()[-1:]}")
    jobs = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", proc.stdout):
        head = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if not head:
            continue
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
        wildcards = dict(kv.split("=", 1) for kv in fields["wildcards"].split(", ")) if "wildcards" in fields else {}
        gpu = re.search(r"\bgpu=(\d+)", fields.get("resources", ""))
        jobs.append({"rule": head.group(1), "id": int(fields["jobid"]), "wildcards": wildcards,
                     "threads": int(fields.get("threads", 1)), "gpus": int(gpu.group(1)) if gpu else 0,
                     "priority": int(fields.get("priority", 0)),
                     "input": _paths(fields.get("input")), "output": _paths(fields.get("output"))})
    producer = {out: job["id"] for job in jobs for out in job["output"]}
    for job in jobs:
        job["deps"] = sorted({producer[i] for i in job["input"] if i in producer})
    return jobs


def _paths(text: str | None) -> list[str]:
    return [p.strip() for p in text.split(",")] if text else []


@dataclasses.dataclass(frozen=True)
class Job:
    id: int
    rule: str
    threads: int
    seconds: float
    deps: tuple[int, ...] = ()
    gpus: int = 0
    priority: int = 0
    label: str = ""  # the rule and its wildcards, for the longest job's line


@dataclasses.dataclass(frozen=True)
class Slot:
    start: float
    end: float


def list_schedule(jobs: Sequence[Job], cores: int, gpus: int = 0) -> dict[int, Slot]:
    """Start and end of every job; a job needs min(threads, cores) cores and min(gpus, gpus) GPUs."""
    by_id = {j.id: j for j in jobs}
    children: dict[int, list[int]] = {i: [] for i in by_id}
    for j in jobs:
        for d in j.deps:
            children[d].append(j.id)
    order, seen = [], set()

    def visit(i: int) -> None:  # dependencies first (iterative: a paper DAG is deep)
        stack = [(i, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
            elif node not in seen:
                seen.add(node)
                stack.append((node, True))
                stack.extend((d, False) for d in reversed(by_id[node].deps) if d not in seen)

    for i in by_id:
        visit(i)
    rank: dict[int, float] = {}  # longest remaining path
    for i in reversed(order):
        rank[i] = by_id[i].seconds + max((rank[c] for c in children[i]), default=0.0)
    waiting = {i: set(by_id[i].deps) for i in by_id}
    ready = [i for i in order if not waiting[i]]
    running: list[tuple[float, int]] = []
    free_cores, free_gpus, now = cores, gpus, 0.0
    slots: dict[int, Slot] = {}

    def need(i: int) -> tuple[int, int]:
        return min(by_id[i].threads, cores), min(by_id[i].gpus, gpus)

    while ready or running:
        ready.sort(key=lambda i: (-by_id[i].priority, -rank[i]))
        for i in list(ready):
            c, g = need(i)
            if c <= free_cores and g <= free_gpus:
                free_cores, free_gpus = free_cores - c, free_gpus - g
                ready.remove(i)
                running.append((now + by_id[i].seconds, i))
                slots[i] = Slot(now, now + by_id[i].seconds)
        running.sort()
        now, i = running.pop(0)
        c, g = need(i)
        free_cores, free_gpus = free_cores + c, free_gpus + g
        for child in children[i]:
            waiting[child].discard(i)
            if not waiting[child]:
                ready.append(child)
    return slots


def gpu_usage(jobs: Sequence[Job], slots: Mapping[int, Slot], gpus: int) -> dict[str, float]:
    """Wall hours, GPU busy and idle hours of a schedule (idle = wall x GPUs - busy), the GPU idle hours
    before the first GPU job and after the last (the run then waits on data or on Lucene), those between
    the first GPU job and the first training (waiting for the training data), and the longest job."""
    wall = max((s.end for s in slots.values()), default=0.0)
    busy = sum((slots[j.id].end - slots[j.id].start) * min(j.gpus, gpus) for j in jobs)
    gpu_jobs = [slots[j.id] for j in jobs if j.gpus]
    first = min((s.start for s in gpu_jobs), default=0.0)
    last = max((s.end for s in gpu_jobs), default=0.0)
    train = min((slots[j.id].start for j in jobs if j.rule == "train"), default=first)  # waits for the training data
    early = sum(max(0.0, min(slots[j.id].end, train) - max(slots[j.id].start, first)) * min(j.gpus, gpus)
                for j in jobs)
    longest = max(jobs, key=lambda j: j.seconds, default=None)
    return {"wall_h": wall / 3600, "gpu_busy_h": busy / 3600, "gpu_idle_h": (wall * gpus - busy) / 3600,
            "gpu_idle_before_first_h": first * gpus / 3600, "gpu_idle_after_last_h": (wall - last) * gpus / 3600,
            "gpu_idle_before_training_h": ((train - first) * gpus - early) / 3600,
            "longest_job_h": longest.seconds / 3600 if longest else 0.0,
            "longest_job": longest.label if longest else ""}


def scheduled_jobs(plan: Mapping[str, Any], jobs: list[dict], cores: int, throughputs: Mapping[str, Any]) -> list[Job]:
    """The dry run's jobs with the bill's durations: a GPU job its GPU-hours over its GPUs, a Lucene job
    its core-hours over its threads (capped at ``cores``), every other job the throughputs' fixed time."""
    fixed, front = throughputs["jobs"], plan.get("training_front", {})
    download = fixed["download_mb_per_s"] * 1e6
    startup_h = float(throughputs["gpu"]["job_startup_s"]) / 3600
    by_model = {(m["name"], m["variant"]): m for m in plan["models"]}
    bm25 = plan["bm25"]
    out = []
    for j in jobs:
        rule, w = j["rule"], j["wildcards"]
        model = by_model.get((w.get("backbone"), w.get("run")))
        hours = {"train": lambda: model["train_gpu_h"] / max(1, j["gpus"]),
                 "encode_corpus": lambda: model["encode_corpus_h"][w["corpus"]],
                 "encode_corpus_part": lambda: part_hours(model["encode_corpus_h"][w["corpus"]],
                                                          plan["corpora"][w["corpus"]]["count"], int(w["part"]),
                                                          int(w["parts"]), startup_h),
                 "encode_queries": lambda: model["query_gpu_h"],
                 "impact_index": lambda: model["index_core_h"][w["corpus"]] / min(j["threads"], cores),
                 "impact_retrieve": lambda: model["retrieve_core_h"][w["dataset"]] / min(j["threads"], cores),
                 "bm25_index": lambda: bm25["index_core_h"][w["corpus"]] / min(j["threads"], cores),
                 "bm25_retrieve": lambda: bm25["retrieve_core_h"][w["dataset"]] / min(j["threads"], cores)}
        if rule in hours:
            seconds = hours[rule]() * 3600
        elif rule == "prepare_corpus" and w.get("corpus") in plan["corpora"]:
            docs = plan["corpora"][w["corpus"]]["count"]
            seconds = docs / fixed["prepare_docs_per_s"] + docs * fixed["corpus_download_bytes_per_doc"] / download
        elif rule == "corpus_digests" and w.get("corpus") in plan["corpora"]:  # one pass, as the docs store's
            seconds = plan["corpora"][w["corpus"]]["count"] / fixed["prepare_docs_per_s"]
        elif rule == "prepare_training_source" and front:
            seconds = front["source_s"]
        elif rule == "prepare_training_data" and w.get("stream") in front.get("data_s", {}):
            seconds = front["data_s"][w["stream"]]
        else:
            seconds = 0.0 if rule == "all" else float(fixed["fixed_s"].get(rule, fixed["default_s"]))
        out.append(Job(j["id"], rule, j["threads"], seconds, tuple(j["deps"]), j["gpus"], j["priority"],
                       " ".join([rule, *w.values()])))
    return out


def training_front(config: Mapping[str, Any], throughputs: Mapping[str, Any]) -> dict[str, Any]:
    """Seconds of prepare_training_source (its download) and of each stream's prepare_training_data (hash
    the raw collection and the queries, map the triples a run reads, write its examples), from the measured
    rates of an ir_datasets source the throughputs know (``jobs.training_sources``); {} for any other."""
    data, jobs = config["training"]["data"], throughputs["jobs"]
    rates = jobs.get("training_sources", {}).get(str(data.get("id")))
    if data["source"] != "ir_datasets" or not rates:
        return {}
    import ir_datasets

    source = ir_datasets.load(data["id"])
    fixed_s = source.docs_count() / rates["hash_docs_per_s"] + source.queries_count() / rates["hash_queries_per_s"]
    streams = [run_stream(resolve_recipe(config, b, run)) for b, run in models(config) if run != PUBLISHED_RUN]
    return {"source_s": rates["download_bytes"] / (jobs["download_mb_per_s"] * 1e6),
            "data_s": {stream_name(s): fixed_s + (s["examples"] + s["shuffle_buffer"]) / rates["map_pairs_per_s"]
                       + s["examples"] / rates["examples_per_s"] for s in streams}}


def part_hours(corpus_h: float, docs: int, part: int, parts: int, startup_h: float) -> float:
    """GPU-hours of one part of a corpus encode: its share of the documents, and a job start of its own."""
    start, stop = part_range(docs, part, parts)
    return (corpus_h - startup_h) * (stop - start) / max(docs, 1) + startup_h


def plan_run(configfile: str | Path, throughputs_file: str | Path | None, cores: int, gpus: int,
             out: str | Path | None = None, root: str | Path = ".", measured: str | Path | None = None,
             remaining: bool = False) -> tuple[dict[str, Any], str]:
    """The bill of a config and its schedule on ``cores`` cores and ``gpus`` GPUs, as data and Markdown
    (written to ``out`` and its .json twin when given); GPU figures measured on this machine (``measured``,
    default ``results/{experiment}/throughputs.measured.json``) replace the shipped ones. ``remaining``: the
    jobs and schedule of what is still to run beside the results there (a run extended by a model or a
    dataset: the increment); the per-model rows stay the whole config's."""
    config = load_config(configfile)
    throughputs_path = Path(throughputs_file or THROUGHPUTS_PATH).resolve()
    throughputs = load_throughputs(throughputs_path)
    sources = take_measured(throughputs, measured or Path(root) / "results" / config["experiment"] / MEASURED_NAME)
    plan = build_plan(config, throughputs, root)
    plan["throughput_sources"] = sources
    plan["training_front"] = training_front(config, throughputs)
    gpus = gpus if gpus_per_job(config) else 0
    jobs = dry_run_jobs(configfile, cores, gpus, root, remaining)
    plan["jobs"], plan["remaining"] = dict(Counter(j["rule"] for j in jobs)), remaining
    shown = throughputs_path.relative_to(REPO) if throughputs_path.is_relative_to(REPO) else throughputs_path
    text = render_bill(plan, plan["jobs"], str(configfile), str(shown))
    if remaining:
        text += (f"\nJobs and schedule: the {len(jobs)} jobs still to run beside the results here (the increment); "
                 "the totals and per-model rows above are the whole config's.\n")
    text += "\nGPU-job figures by architecture (a measured one replaces the shipped one; `make preflight` measures " \
            "this machine's):\n\n" + "".join(f"- {a}: {s}\n" for a, s in sources.items())
    if gpus:
        timed = scheduled_jobs(plan, jobs, cores, throughputs)
        slots = list_schedule(timed, cores, gpus)
        plan["schedule"] = {"cores": cores, "gpus": gpus, "threads": local_threads(config, cores, gpus),
                            **gpu_usage(timed, slots, gpus),
                            **host_at_once(timed, slots, plan["memory"], throughputs["host"]["gpu_job_floor_gib"])}
        text += "\n" + render_schedule(plan["schedule"])
    else:
        text += ("\nNo schedule: the model jobs run on the CPU (device: cpu or gpus_per_job: 0); the GPU figures "
                 "above do not apply.\n")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
        Path(out).with_suffix(".json").write_text(json.dumps(plan, indent=1) + "\n")
    return plan, text


def render_schedule(s: Mapping[str, Any]) -> str:
    t, h = s["threads"], lambda x: f"{x:,.1f}"
    return "\n".join([
        f"## Schedule on {s['cores']} cores and {s['gpus']} GPU(s)", "",
        "The dry run's jobs at their threads on this machine (train "
        f"{t['train']}, encode {t['encode']}, each index or search {t['lucene']}), each started when its threads "
        "and GPUs are free, the longest remaining path first.", "",
        "| figure | hours |", "|---|---|",
        f"| wall | {h(s['wall_h'])} (peak host memory {h(s['peak_host_gib'])} GiB, {s['jobs_at_once']} jobs at once) |",
        f"| GPU busy | {h(s['gpu_busy_h'])} |",
        f"| GPU idle | {h(s['gpu_idle_h'])} ({s['gpu_idle_h'] / max(s['wall_h'] * s['gpus'], 1e-9):.0%}) |",
        f"| of which before the first GPU job (downloads, data preparation) | {h(s['gpu_idle_before_first_h'])} |",
        f"| of which after the last GPU job (the last indexes and searches) | {h(s['gpu_idle_after_last_h'])} |",
        "| of which in between (no GPU job ready, or its threads held by Lucene jobs) | "
        f"{h(s['gpu_idle_h'] - s['gpu_idle_before_first_h'] - s['gpu_idle_after_last_h'])} |",
        "| of which, in between, before the first training (its data not ready; only published models encode) | "
        f"{h(s['gpu_idle_before_training_h'])} |",
        f"| longest job ({s['longest_job']}) | {h(s['longest_job_h'])} |", ""])
