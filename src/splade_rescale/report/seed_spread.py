"""A variant's figure over its training seeds: the mean over the seeds that did not collapse,
and their spread (min–max for three or fewer, the sample sd above).

Why one place: tables and figures must leave out the same seeds and show the same spread.
A one-seed variant's value passes through unchanged, so its tables are as without seeds.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

COLLAPSED = "collapsed"
MIN_MAX_UP_TO = 3  # seeds; more: mean ± sd


@dataclass(frozen=True)
class SeedSpread:
    """One figure of several seeds: ``values`` of the seeds kept, out of ``seeds`` trained."""

    values: tuple[float, ...]
    seeds: int

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def error(self) -> tuple[float, float]:
        """(below, above) the mean: to min and max, or ± sd (error bars)."""
        if len(self.values) > MIN_MAX_UP_TO:
            return self.sd, self.sd
        return self.mean - self.low, self.high - self.mean

    def text(self, fmt: Callable[[Any], str]) -> str:
        if len(self.values) == 1:
            return fmt(self.mean)
        if len(self.values) <= MIN_MAX_UP_TO:
            return f"{fmt(self.mean)} ({fmt(self.low)}–{fmt(self.high)})"
        return f"{fmt(self.mean)} ± {fmt(self.sd)}"


def run_collapsed(run: Mapping[str, Any]) -> bool:
    return ((run or {}).get("training") or {}).get("status") == COLLAPSED


def over_seeds(runs: Sequence[Mapping[str, Any]], compute: Callable[[Mapping[str, Any]], Any]) -> Any:
    """``compute(run)`` for a one-seed variant; over several seeds, a :class:`SeedSpread` of the
    seeds that did not collapse (``collapsed`` when all did; a status word or None passes through)."""
    if len(runs) == 1:
        return compute(runs[0])
    kept = [r for r in runs if not run_collapsed(r)]
    if not kept:
        return COLLAPSED
    values = [compute(r) for r in kept]
    for v in values:
        if isinstance(v, str):
            return v
    if any(v is None for v in values):
        return None
    return SeedSpread(tuple(float(v) for v in values), len(runs))


def mean_per_query(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-query scores averaged over seeds (a query missing from a seed's run counts for the others)."""
    out: dict[str, list[float]] = {}
    for scores in per_query:
        for qid, score in scores.items():
            out.setdefault(qid, []).append(float(score))
    return {qid: sum(v) / len(v) for qid, v in out.items()}
