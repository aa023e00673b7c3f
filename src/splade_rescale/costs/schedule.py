"""When each job of a run starts and ends on ``cores`` CPU cores and ``gpus`` GPUs.

Why: the bill of a GPU run is its wall time, and that depends on whether the GPU can keep
working while Lucene jobs hold the cores. Snakemake starts a ready job only when its threads
(capped at ``--cores``) and its ``gpu`` resource are free; this models the same constraints by
list scheduling: the ready job with the longest remaining path first, lower-priority jobs
backfilling what is left. Snakemake's own choice among ready jobs (an ILP over priorities and
resources) differs in order, not in the constraints, so idle time caused by a resource shortage
shows up the same way.

``splade-rescale plan --cores N`` (:func:`schedule_config`) gives a dry run's jobs the plan's
durations and schedules them: the GPU's busy and idle hours.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

from splade_rescale.config import local_threads
from splade_rescale.costs.inputs import load_plan_config, load_throughputs
from splade_rescale.costs.plan import build_plan
from splade_rescale.costs.plan_report import format_hours


@dataclasses.dataclass(frozen=True)
class Job:
    id: int
    rule: str
    threads: int
    seconds: float
    deps: tuple[int, ...] = ()
    gpus: int = 0
    priority: int = 0


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
    """Wall hours, GPU busy and idle hours of a schedule (idle = wall x GPUs - busy)."""
    wall = max((s.end for s in slots.values()), default=0.0)
    busy = sum((slots[j.id].end - slots[j.id].start) * min(j.gpus, gpus) for j in jobs)
    gpu_jobs = [slots[j.id] for j in jobs if j.gpus]
    first = min((s.start for s in gpu_jobs), default=0.0)
    last = max((s.end for s in gpu_jobs), default=0.0)
    return {"wall_h": wall / 3600, "gpu_busy_h": busy / 3600, "gpu_idle_h": (wall * gpus - busy) / 3600,
            "gpu_idle_before_first_h": first * gpus / 3600, "gpu_idle_after_last_h": (wall - last) * gpus / 3600}


# --- the plan's jobs on a machine -------------------------------------------------------------

def scheduled_jobs(plan: Mapping[str, Any], jobs: list[dict], cores: int, throughputs: Mapping[str, Any],
                   gpus_per_job: int = 1) -> list[Job]:
    """The dry run's jobs with the plan's durations: GPU jobs from its GPU-hours, Lucene jobs from
    its core-hours over their threads (capped at ``cores``), other jobs the throughputs' fixed times."""
    fixed = throughputs.get("jobs") or {}
    default_s = float(fixed.get("default_s", 30))
    by_model = {(m["name"], m["variant"]): m for m in plan["models"]}
    bm25 = plan["bm25"]
    out = []
    for j in jobs:
        rule, w, threads = j["rule"], j["wildcards"], j["threads"]
        model = by_model.get((w.get("backbone"), w.get("variant")))
        lucene = 3600 / min(threads, cores)  # core-hours -> seconds of a job on its threads
        gpus = 0
        if rule == "all":
            seconds = 0.0
        elif rule == "train":
            gpus = int(plan["train_gpus"].get(w["backbone"], gpus_per_job))
            seconds = model["train_gpu_h"] * 3600 / max(1, gpus)
        elif rule == "encode_corpus":
            gpus, seconds = gpus_per_job, model["encode_corpus_h"][w["corpus"]] * 3600
        elif rule == "encode_queries":
            gpus, seconds = gpus_per_job, model["query_gpu_h"] * 3600
        elif rule == "impact_index":
            seconds = model["index_core_h"][w["corpus"]] * lucene
        elif rule == "impact_retrieve":
            seconds = model["retrieve_core_h"][w["dataset"]] * lucene
        elif rule == "bm25_index":
            seconds = bm25["index_core_h"][w["corpus"]] * lucene
        elif rule == "bm25_retrieve":
            seconds = bm25["retrieve_core_h"][w["dataset"]] * lucene
        elif rule == "prepare_corpus" and w.get("corpus") in plan["corpora"]:
            seconds = plan["corpora"][w["corpus"]]["count"] / float(fixed.get("prepare_docs_per_s", 5000))
        else:
            seconds = float((fixed.get("fixed_s") or {}).get(rule, default_s))
        out.append(Job(j["id"], rule, threads, seconds, tuple(j["deps"]), gpus, j.get("priority", 0)))
    return out


def schedule(plan: Mapping[str, Any], jobs: list[dict], cores: int, gpus: int, throughputs: Mapping[str, Any],
             gpus_per_job: int = 1) -> dict[str, Any]:
    """The run on ``cores`` cores and ``gpus`` GPUs: wall hours and the GPU's busy and idle hours."""
    timed = scheduled_jobs(plan, jobs, cores, throughputs, gpus_per_job)
    usage = gpu_usage(timed, list_schedule(timed, cores, gpus), gpus)
    return {"cores": cores, "gpus": gpus, "jobs": len(timed), **usage}


def schedule_config(configfile: str | Path, throughputs_file: str | Path | None, cores: int, gpus: int = 1,
                    root: str | Path = ".") -> tuple[dict[str, Any], str]:
    """``plan --cores N`` for a GPU config: the schedule and its Markdown, the jobs' threads as the
    workflow gives them on that machine (config.local_threads)."""
    from splade_rescale.costs.fit_throughputs import dry_run_jobs  # fit_throughputs imports this module

    config = load_plan_config(configfile)
    throughputs = load_throughputs(throughputs_file)
    plan = build_plan(config, throughputs, root)
    result = schedule(plan, dry_run_jobs(configfile, workdir=root, cores=cores, gpus=gpus), cores, gpus,
                      throughputs, int(config.get("gpus_per_job") or 1))
    result["threads"] = local_threads(config, cores, gpus)
    return result, render_schedule(result)


def render_schedule(s: Mapping[str, Any]) -> str:
    t = s["threads"]
    return "\n".join([
        f"## Schedule on {s['cores']} cores and {s['gpus']} GPU(s)", "",
        "Jobs list-scheduled as Snakemake runs them: a job starts when its threads (capped at the cores) "
        "and its `gpu` resource are free; longest remaining path first. Threads on this machine: train "
        f"{t['train']}, encode {t['encode']}, each index or search {t['lucene']}.", "",
        "| figure | hours |", "|---|---|",
        f"| wall | {format_hours(s['wall_h'])} |", f"| GPU busy | {format_hours(s['gpu_busy_h'])} |",
        f"| GPU idle | {format_hours(s['gpu_idle_h'])} ({s['gpu_idle_h'] / max(s['wall_h'] * s['gpus'], 1e-9):.0%}) |",
        "| of which before the first GPU job (downloads, data preparation) | "
        f"{format_hours(s['gpu_idle_before_first_h'])} |",
        "| of which after the last GPU job (the last indexes and searches) | "
        f"{format_hours(s['gpu_idle_after_last_h'])} |", ""])
