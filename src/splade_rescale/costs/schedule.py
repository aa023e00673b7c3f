"""When each job of a run starts and ends on ``cores`` CPU cores and ``gpus`` GPUs.

Why: the bill of a GPU run is its wall time, and that depends on whether the GPU can keep
working while Lucene jobs hold the cores. Snakemake starts a ready job only when its threads
(capped at ``--cores``) and its ``gpu`` resource are free; this models the same constraints by
list scheduling: the ready job with the longest remaining path first, lower-priority jobs
backfilling what is left. Snakemake's own choice among ready jobs (an ILP over priorities and
resources) differs in order, not in the constraints, so idle time caused by a resource shortage
shows up the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class Job:
    id: int
    rule: str
    threads: int
    seconds: float
    deps: tuple[int, ...] = ()
    gpus: int = 0


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
        ready.sort(key=lambda i: -rank[i])
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
