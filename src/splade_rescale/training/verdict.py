"""The sparsity verdict on a finished training run: a cheap step of its own (rule ``judge_training``).

Training records what happened (the weights, the log, the non-zeros of every step in
``sparsity.csv``, and a non-finite stop, which ends a run at once). Whether the run collapsed into
all-zero, near-empty or near-dense vectors is a judgement on that record under the collapse floors
(recipe keys ``collapse_*``, :data:`splade_rescale.rule_params.VERDICT_KEYS`). Judged apart, a change
of floors reruns this step and the tables, never the training.

The verdict must not decide the paper's question by itself. Sparsity is judged on the mean
non-zeros of the last ``collapse_window`` steps after the FLOPS warm-up, so a head that is dense at
initialisation has the whole run to sparsify before it counts as collapsed.

Kept free of torch: the Snakefile also calls :func:`judge` while it builds the DAG, to know whether
new floors change a run's status (and so its encodings) or only its verdict's wording.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from splade_rescale.atomic import write_json

SPARSITY_COLUMNS = ("step", "nnz_q", "nnz_d")
Series = Sequence[tuple[int, float, float]]  # (step, mean non-zeros per query, per document), every step


def read_series(path: str | Path) -> list[tuple[int, float, float]]:
    """The per-step non-zeros a training run wrote (``sparsity.csv``)."""
    with open(path, newline="") as f:
        return [(int(r["step"]), float(r["nnz_q"]), float(r["nnz_d"])) for r in csv.DictReader(f)]


def series_csv(series: Series) -> str:
    """``sparsity.csv``'s text: one row per step, values as Python writes floats (exact round trip)."""
    return ",".join(SPARSITY_COLUMNS) + "\n" + "".join(f"{s},{q!r},{d!r}\n" for s, q, d in series)


def _onset(series: Series, holds) -> int | None:
    """The first step of the run of steps at the end of ``series`` where ``holds`` is true, if any."""
    start = None
    for step, q, d in series:
        start = (start or step) if holds(q, d) else None
    return start


def sparsity_verdict(series: Series, warmup_steps: int, floors: Mapping[str, Any], vocab: int
                     ) -> tuple[dict[str, Any] | None, str | None, int | None, str | None]:
    """(end-of-training statistics, collapse reason, collapse step, brief verdict).

    Collapsed when the window's mean non-zeros of queries or documents is below
    ``collapse_min_nnz`` (all-zero), below ``collapse_near_empty_q`` / ``collapse_near_empty_d``
    (near-empty: a handful of terms left, which no healthy SPLADE model has), or above
    ``collapse_dense_fraction`` x vocab (near-dense). The collapse step is when the vectors last
    became so and stayed so to the end, or the window's first step if the last step was not. The
    brief verdict (e.g. ``near-empty: 2.6 terms per document``) is what the training table shows.
    No step after the warm-up: not judged.
    """
    window = [row for row in series if row[0] > warmup_steps][-int(floors["collapse_window"]):]
    if not window:
        return None, None, None, None
    first, last = window[0][0], window[-1][0]
    q, d = statistics.fmean(w[1] for w in window), statistics.fmean(w[2] for w in window)
    stats = {"window_steps": [first, last], "mean_nnz_q": q, "mean_nnz_d": d}
    where = f"mean non-zeros over steps {first}-{last} (after the FLOPS warm-up): q={q:.2f}, d={d:.2f}"
    low = floors["collapse_min_nnz"]
    if min(q, d) < low:
        return (stats, f"all-zero representations: {where} < {low}",
                _onset(series, lambda a, b: min(a, b) < low) or first,
                f"all-zero: {min(q, d):.2g} terms per {'query' if q < d else 'document'}")
    floor_q, floor_d = floors["collapse_near_empty_q"], floors["collapse_near_empty_d"]
    if q < floor_q or d < floor_d:
        side, value = ("document", d) if d < floor_d else ("query", q)
        return (stats, f"near-empty representations: {where}; floors q={floor_q:g}, d={floor_d:g}",
                _onset(series, lambda a, b: a < floor_q or b < floor_d) or first,
                f"near-empty: {value:.1f} terms per {side}")
    dense = floors["collapse_dense_fraction"] * vocab
    if max(q, d) > dense:
        side, value = ("query", q) if q > d else ("document", d)
        return (stats, f"near-dense representations: {where} > {floors['collapse_dense_fraction']} x vocab ({vocab})",
                _onset(series, lambda a, b: max(a, b) > dense) or first,
                f"near-dense: {value:.0f} of {vocab} terms per {side}")
    return stats, None, None, None


def check_floors(floors: Mapping[str, Any]) -> None:
    """The floors are numbers and the window a positive number of steps (one line naming the key otherwise)."""
    from splade_rescale.training.recipes import TrainingConfigError

    window = floors["collapse_window"]
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise TrainingConfigError(f"collapse_window = {window!r} must be a positive number of steps")
    for key, value in floors.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TrainingConfigError(f"{key} = {value!r} is not a number (in YAML write 4.0, not 4)")


def judge(record: Mapping[str, Any], series: Series, floors: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest of a run: its training record with the status and verdict under ``floors``.

    A run stopped by a non-finite loss or gradient stays collapsed whatever the floors.
    """
    manifest = {**record, "floors": dict(floors), "sparsity": None}
    if record["status"] != "ok":
        return manifest
    stats, reason, step, brief = sparsity_verdict(series, int(record["recipe"]["flops_warmup_steps"]), floors,
                                                  int(record["vocab_size"]))
    manifest.update(sparsity=stats, reason=reason, collapse_step=step, verdict=brief,
                    status="collapsed" if reason else "ok")
    return manifest


def judge_files(record_path: str | Path, series_path: str | Path, floors: Mapping[str, Any],
                out: str | Path | None = None) -> dict[str, Any]:
    """:func:`judge` on a run's ``training.json`` and ``sparsity.csv``; written to ``out`` when given."""
    manifest = judge(json.loads(Path(record_path).read_text()), read_series(series_path), floors)
    if out is not None:
        write_json(out, manifest)
    return manifest
