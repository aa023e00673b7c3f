"""Significance marks and the caption sentences that explain a table's cells.

Two-sided paired t-test on per-query scores (:func:`splade_rescale.evaluation.evaluate.compare_systems`),
Holm correction over all comparisons in a table column; marks: † against the same backbone's
baseline variant, ‡ against the reference backbone with the same variant.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from splade_rescale.evaluation.evaluate import compare_systems, correct_pvalues
from splade_rescale.report.results import MISSING, Results, Table
from splade_rescale.report.seed_spread import MIN_MAX_UP_TO
from splade_rescale.report.summary import seeds_of

ALPHA = 0.05
MARK_BASELINE, MARK_REFERENCE = "†", "‡"


def mark_column(table: Table, col: int, results: Results, dataset: str, metric: str) -> None:
    """Test each model against its baseline variant and the reference backbone; Holm over the column."""
    row_of = {system: r for r, system in enumerate(results.systems)}
    per_query = {}
    for system in results.models:
        scores = results.per_query(system, dataset, metric)
        if scores is not None:
            per_query[system] = scores
    comparisons: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for system in per_query:
        backbone, variant = system
        for ref in ((backbone, results.baseline), (results.reference, variant)):
            if ref != system and ref in per_query:
                comparisons.setdefault(ref, []).append(system)
    raw: dict[tuple[tuple[str, str], tuple[str, str]], float] = {}
    for ref, systems in comparisons.items():
        tests = compare_systems({"ref": per_query[ref], **{f"s{i}": per_query[s] for i, s in enumerate(systems)}},
                                "ref", test="student", correction="holm", alpha=ALPHA)
        for i, s in enumerate(systems):
            raw[(s, ref)] = tests[f"s{i}"]["p_value"]
    adjusted = correct_pvalues(raw, "holm") if raw else {}
    table.tested_columns.add(col)
    for (system, ref), p in adjusted.items():
        if p < ALPHA:
            mark = MARK_BASELINE if ref[0] == system[0] else MARK_REFERENCE
            key = (row_of[system], col)
            table.marks[key] = "".join(sorted(table.marks.get(key, "") + mark))


def significance_note(results: Results) -> str:
    note = (f"{MARK_BASELINE}: significantly different from the same backbone's '{results.baseline}' variant; "
            f"{MARK_REFERENCE}: significantly different from the reference backbone ({results.reference}) with "
            f"the same variant (two-sided paired t-test on per-query scores, Holm correction over all "
            f"comparisons in the column, alpha = {ALPHA}; collapsed runs are not tested).")
    return note + (seeds_note() if results.multi_seed else "")


def seeds_note() -> str:
    return (" Variants trained with several seeds: each cell is the mean over the seeds that did not collapse, "
            f"with its min–max in parentheses for {MIN_MAX_UP_TO} or fewer seeds and ± the sample sd for more; "
            "'seeds' gives the seeds each mean covers (not collapsed / trained); their significance tests use "
            "per-query scores averaged over those seeds.")


def notes_sentence(notes: Mapping[str, str]) -> str:
    by_note: dict[str, list[str]] = {}
    for dataset, note in notes.items():
        by_note.setdefault(note, []).append(dataset)
    return " ".join(f"{', '.join(ds)}: {note}." for note, ds in by_note.items())


def missing_queries_sentence(results: Results, datasets: Iterable[str]) -> str:
    """Judged queries a run returned nothing for (scored 0): never silent."""
    items = []
    for d in datasets:
        for system in results.systems:
            seeds = seeds_of(results.variant(system)) if results.trained(system) else None
            for i, run in enumerate(results.runs(system)):  # each seed's run
                n = (run.get("datasets", {}).get(d) or {}).get("n_queries_without_results") or 0
                if n:
                    name = "/".join(x for x in system if x != MISSING) + (f" seed {seeds[i]}" if seeds else "")
                    items.append(f"{name} on {d}: {n}")
    return f" Judged queries without any result (scored 0): {'; '.join(items)}." if items else ""
