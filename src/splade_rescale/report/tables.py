"""The paper's tables (Markdown, CSV, LaTeX and HTML for the Snakemake report) from the summaries.

Every table shares the same rows (BM25, backbone x variant, then published checkpoints, :mod:`.results`),
the same rule for collapsed runs (the word "collapsed" instead of numbers), the same significance procedure
(:mod:`.significance`), the same renderers (:mod:`.rendering`) and the same provenance line
(:mod:`.provenance`), so a table can never silently differ from another in how it was made. This
module holds the tables themselves; at ~450 lines it is over the usual size because each of its
nine tables is one function with its caption, and splitting them apart would scatter the one
place a reader compares them.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from splade_rescale.atomic import write_text
from splade_rescale.config import parse_factor
from splade_rescale.evaluation.evaluate import METRIC_SETS, PRIMARY
from splade_rescale.report.provenance import provenance
from splade_rescale.report.rendering import FORMATS, RENDERERS
from splade_rescale.report.results import (
    BM25,
    Column,
    Results,
    Table,
    cell_value,
    constant_variants,
    dataset_metric_set,
    fmt_metric,
    primary_mean,
    unscored,
)
from splade_rescale.report.seed_spread import COLLAPSED, SeedSpread, over_seeds, run_collapsed
from splade_rescale.report.significance import (
    mark_column,
    missing_queries_sentence,
    notes_sentence,
    seeds_note,
    significance_note,
)
from splade_rescale.report.summary import seeds_of
from splade_rescale.runs import PUBLISHED_RUN

BASE_TABLES = ("head_norms", "in_domain", "beir", "beir_recall", "efficiency", "training")
SWEEP_TABLE = "factor_sweep"
CALIBRATION_TABLE = "calibration"
CALIBRATION_TOLERANCE = 0.005  # |ours - published| above this on a full collection: the chain differs
IN_DOMAIN_SETS = ("msmarco", "trec-dl")


def table_names(config: Mapping[str, Any]) -> list[str]:
    """Tables this config produces: the factor sweep (and its figure) only with more than two constant factors,
    calibration only with published models or published BM25 figures."""
    return (list(BASE_TABLES) + ([SWEEP_TABLE] if len(constant_variants(config)) > 2 else [])
            + ([CALIBRATION_TABLE] if calibration_sources(config) else []))


def calibration_sources(config: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """System name -> its ``published`` map: every published model, and BM25 if it has one."""
    out = {name: spec.get("published") or {} for name, spec in (config.get("published_models") or {}).items()}
    if (config.get("bm25") or {}).get("published"):
        out[BM25[0]] = config["bm25"]["published"]
    return out


def label_columns() -> list[Column]:
    return [Column("backbone"), Column("variant")]


def effectiveness_table(name: str, caption: str, results: Results, columns: list[tuple[str, str]],
                        means: Mapping[str, list[tuple[str, str]]] | None = None) -> Table:
    """Rows = systems; one column per (dataset, metric), then one mean column per ``means`` entry
    ({label: the (dataset, metric) columns it averages}; not tested for significance)."""
    table = Table(name, caption, label_columns() + [Column(f"{d} {m}", fmt_metric) for d, m in columns])
    table.columns += [Column(label, fmt_metric) for label in means or {}]
    table.columns += [Column("seeds")] if results.multi_seed else []

    def mean_of(entry_of: Callable[[str], Any], cells: list[tuple[str, str]]) -> Any:
        values = [cell_value(entry_of(d), m) for d, m in cells]
        words = [v for v in values if isinstance(v, str)]
        return words[0] if words else None if None in values or not values else sum(values) / len(values)

    for system in results.systems:
        row: list[Any] = list(system)
        row += [results.value(system, lambda entry_of, d=d, m=m: cell_value(entry_of(d), m)) for d, m in columns]
        row += [results.value(system, lambda entry_of, cells=cells: mean_of(entry_of, cells))
                for cells in (means or {}).values()]
        row += [results.seeds_cell(system)] if results.multi_seed else []
        table.rows.append(row)
    for c, (d, m) in enumerate(columns, start=2):
        mark_column(table, c, results, d, m)
    return table


def no_datasets_table(name: str, kind: str) -> Table:
    """A one-line table for a config without datasets of a kind: the file exists and says why it is empty."""
    text = f"no {kind} datasets in this config"
    return Table(name, f"{text[0].upper()}{text[1:]}.", [Column("note")], [[text]])


def in_domain_table(results: Results) -> Table:
    datasets = results.datasets(IN_DOMAIN_SETS)
    if not datasets:
        return no_datasets_table("in_domain", "in-domain (MS MARCO or TREC DL)")
    columns = [(d, m) for d in datasets for m in METRIC_SETS[dataset_metric_set(results.config, d)]]
    caption = ("In-domain effectiveness (MS MARCO dev: MRR@10, R@1000; TREC DL: nDCG@10, R@1000 with "
               "grade >= 2 relevant). " + significance_note(results) + " "
               + notes_sentence(results.notes(datasets)) + missing_queries_sentence(results, datasets))
    return effectiveness_table("in_domain", caption, results, columns)


def beir_table(results: Results) -> Table:
    datasets = results.datasets(["beir"])
    if not datasets:
        return no_datasets_table("beir", "BEIR")
    columns = [(d, PRIMARY["beir"]) for d in datasets]
    caption = (f"BEIR nDCG@10 per dataset and its mean over the {len(datasets)} BEIR datasets of this config "
               "(the paper: 13; a mean over another set is not comparable to it). Marks are per dataset, "
               "none on the mean. " + significance_note(results) + " "
               + notes_sentence(results.notes(datasets)) + missing_queries_sentence(results, datasets))
    return effectiveness_table("beir", caption, results, columns, means={f"mean ({len(datasets)})": columns})


BEIR_RECALLS = ("R@100", "R@1000")


def beir_recall_table(results: Results) -> Table:
    """R@100 (the BEIR paper) and R@1000 (Pyserini's BEIR pages) next to the nDCG@10 table."""
    datasets = results.datasets(["beir"])
    if not datasets:
        return no_datasets_table("beir_recall", "BEIR")
    columns = [(d, m) for d in datasets for m in BEIR_RECALLS]
    caption = (f"BEIR recall per dataset, R@100 (as in the BEIR paper) and R@1000 (as on Pyserini's BEIR "
               f"pages), grade >= 1 relevant, and each one's mean over the {len(datasets)} BEIR datasets of this "
               "config (the paper: 13; a mean over another set is not comparable to it). Marks are per dataset, "
               "none on the means. " + significance_note(results) + " "
               + notes_sentence(results.notes(datasets)) + missing_queries_sentence(results, datasets))
    means = {f"mean {m} ({len(datasets)})": [(d, m) for d in datasets] for m in BEIR_RECALLS}
    return effectiveness_table("beir_recall", caption, results, columns, means=means)


EFFICIENCY_COLUMNS = [
    ("mean_nnz_per_query", "nnz/query", lambda v: f"{v:.1f}"),
    ("mean_nnz_per_doc", "nnz/doc", lambda v: f"{v:.1f}"),
    ("flops", "FLOPS", lambda v: f"{v:.3g}"),
    ("index_size_bytes", "index MB", lambda v: f"{v / 1e6:.1f}"),
    ("qps", "QPS", lambda v: f"{v:.1f}"),
]


def efficiency_table(results: Results) -> Table:
    columns = [Column("dataset")] + label_columns() + [Column(label, fmt) for _, label, fmt in EFFICIENCY_COLUMNS]
    caption = ("Sparsity and efficiency per dataset: mean non-zero terms per query and per document, FLOPS "
               "(expected multiplications per query-document pair, sum over terms of p_q(t) p_d(t)), "
               "index size on disk and queries per second of the retrieval run. QPS depends on the threads each "
               "search ran on (retrieval.threads, capped by what --cores leaves) and on the machine: it compares "
               "between rows of one run, not across machines or runs. "
               "Collapsed runs show 'collapsed'; a corpus estimated over encoding.index_budget_gb shows 'too dense' "
               "(not indexed). " + notes_sentence(results.notes(results.config["datasets"])))
    if results.multi_seed:
        columns.append(Column("seeds"))
        caption += seeds_note()
    table = Table("efficiency", caption, columns)
    for d in results.config["datasets"]:
        for system in results.systems:
            row: list[Any] = [d, *system]
            row += [results.value(system, lambda entry_of, key=key: unscored(entry_of(d))
                                  or ((entry_of(d) or {}).get("efficiency") or {}).get(key))
                    for key, _, _ in EFFICIENCY_COLUMNS]
            table.rows.append(row + ([results.seeds_cell(system)] if results.multi_seed else []))
    return table


TRAINING_LOG_COLUMNS = [("loss", "final loss"), ("nnz_q", "nnz q"), ("nnz_d", "nnz d"), ("flops_q", "FLOPS q"),
                        ("flops_d", "FLOPS d"), ("max_weight", "max weight")]


def training_table(results: Results) -> Table:
    columns = label_columns() + [Column("recipe"), Column("status"), Column("steps")]
    columns += [Column(label) for _, label in TRAINING_LOG_COLUMNS]
    columns += [Column("collapse step"), Column("reason")]
    caption = ("SPLADE training outcome per backbone and variant: status, steps done / planned, the last logged "
               "training-batch statistics (loss, mean non-zeros and FLOPS of queries and documents, largest "
               "term weight), and for a collapsed run the step and reason. Collapsed: a non-finite loss or "
               "gradient (training stops at once), or all-zero, near-empty (a handful of terms per query or "
               "document) or near-dense representations (judged only after the FLOPS warm-up, from "
               "end-of-training statistics), named beside the status. A collapsed run's model is still "
               "written, but it is not encoded, indexed or retrieved (SKIPPED.json): the other tables show "
               "'collapsed' instead of numbers. BM25 is not trained.")
    if results.multi_seed:
        columns.insert(2, Column("seed"))
        caption += (" Variants trained with several seeds: a first row with how many of the seeds collapsed "
                    "(e.g. '1/3 collapsed') and the mean of the last-logged statistics over the seeds that did "
                    "not, then one row per seed.")
    table = Table("training", caption, columns)

    def run_row(training: Mapping[str, Any]) -> list[Any]:
        last = training.get("last_log") or {}
        steps = (f"{training['steps_done']}/{training['steps_planned']}"
                 if training.get("steps_done") is not None else None)
        status = training.get("status")
        if status == "collapsed" and training.get("verdict"):
            status = f"collapsed ({training['verdict']})"
        return [training.get("recipe"), status, steps,
                *[last.get(key) for key, _ in TRAINING_LOG_COLUMNS],
                training.get("collapse_step"), training.get("reason")]

    for system in results.models:
        seeds = seeds_of(results.variant(system))
        if not seeds:
            training = results.variant(system).get("training") or {}
            table.rows.append([*system, *([None] if results.multi_seed else []), *run_row(training)])
            continue
        runs = results.runs(system)
        collapsed = sum(run_collapsed(r) for r in runs)
        recipes = {(r.get("training") or {}).get("recipe") for r in runs}
        means = [over_seeds(runs, lambda r, key=key: ((r.get("training") or {}).get("last_log") or {}).get(key))
                 for key, _ in TRAINING_LOG_COLUMNS]
        table.rows.append([*system, "all", recipes.pop() if len(recipes) == 1 else None,
                           f"{collapsed}/{len(runs)} collapsed", None,
                           *[m.mean if isinstance(m, SeedSpread) else None for m in means], None, None])
        for seed, run in zip(seeds, runs):
            table.rows.append([*system, seed, *run_row(run.get("training") or {})])
    return table


def head_norms_table(results: Results, norms_csv: Path) -> Table:
    """Decoder norms of each backbone before (as released) and after each variant's rescaling."""
    from splade_rescale.model.norms import TABLE_COLUMNS

    label = dict(TABLE_COLUMNS)
    with open(norms_csv, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    by_key = {(row[label["backbone"]], row[label["variant"]]): row for row in rows}
    shown = [("decoder_row_norm_mean", "row L2 mean"), ("decoder_frobenius_norm", "‖W‖_F"),
             ("queries.max_logit", "q max logit")]
    variants = list(results.config["variants"])
    columns = label_columns()[:1] + [Column("architecture")]
    columns += [Column(f"{short} (original)") for _, short in shown]
    for v in variants:
        columns += [Column(f"factor ({v})")] + [Column(f"{short} ({v})") for _, short in shown]
    table = Table("head_norms", "", columns)

    def number(row: Mapping[str, str] | None, key: str) -> float | None:
        text = (row or {}).get(label[key], "")
        return float(text) if text not in ("", None) else None

    for backbone in results.config["backbones"]:
        original = by_key.get((backbone, "backbone"))
        row: list[Any] = [backbone, (original or {}).get(label["architecture"])]
        row += [number(original, key) for key, _ in shown]
        for v in variants:
            after = by_key.get((backbone, v))
            row += [number(after, "factor")] + [number(after, key) for key, _ in shown]
        table.rows.append(row)
    table.caption = (
        "MLM-head norms per backbone as released (original) and in each variant's initial model "
        f"({', '.join(f'{v}: ' + describe_variant(results.config, v) for v in variants)}): mean L2 norm of "
        "the decoder's vocabulary rows, its Frobenius norm, and the largest logit on the probe queries at "
        "initialisation. Full statistics: norms.md.")
    return table


def describe_variant(config: Mapping[str, Any], variant: str) -> str:
    spec = config["variants"][variant]
    if spec["policy"] == "constant":
        return f"head x {spec['factor']}"
    if spec["policy"] == "vocab_transfer":
        source = spec["tokenizer"]
        name = source.get("repo_id") or source.get("package") or Path(source.get("path", "?")).name
        target = spec.get("target_nnz")
        bias = ("" if target is None else ", bias shifted to the reference's active terms" if target == "reference"
                else f", bias shifted to {target:g} active terms")
        return (f"vocabulary moved to {name}" + bias
                + (f", head x {spec['factor']}" if "factor" in spec else ""))
    if spec["policy"] == "logit_shift":
        shift = ("shifted to the reference's active terms" if spec["shift"] == "reference"
                 else f"shifted by {spec['shift']:g}")
        return f"logits {shift} at every forward" + (f", head x {spec['factor']}" if "factor" in spec else "")
    return f"head scaled to {spec['reference']}'s {spec.get('norm', 'mean_row')} norm"


SWEEP_POLICIES = ("constant", "match_reference", "logit_shift")


def sweep_shift(results: Results, system: tuple[str, str]) -> float | None:
    """The activation shift a ``logit_shift`` system was trained with, as recorded with its norms
    (``reference`` resolved for this backbone); None for the other policies."""
    if results.config["variants"][system[1]]["policy"] != "logit_shift":
        return None
    return (results.variant(system).get("norms") or {}).get("logit_shift")


def sweep_factor(results: Results, system: tuple[str, str]) -> float | None:
    """The head factor a system was trained with: the config's constant, or the one
    ``match_reference`` resolved for this backbone (recorded with the variant's norms)."""
    spec = results.config["variants"][system[1]]
    if spec["policy"] == "constant":
        return parse_factor(spec["factor"])
    if spec["policy"] == "logit_shift":
        return parse_factor(spec.get("factor", 1))
    return (results.variant(system).get("norms") or {}).get("factor")


def _mean_over(entry_of: Callable[[str], Any], datasets: Iterable[str], value_of: Callable[[Any], Any]) -> Any:
    """Mean of ``value_of(entry)`` over ``datasets``: a status word if an entry has one, None if one is missing."""
    values = []
    for d in datasets:
        entry = entry_of(d)
        value = unscored(entry) or (value_of(entry) if entry is not None else None)
        if isinstance(value, str) or value is None:
            return value
        values.append(value)
    return sum(values) / len(values) if values else None


def factor_sweep_table(results: Results) -> Table:
    """One row per backbone and head factor (constant, ``match_reference`` and ``logit_shift``
    variants), largest factor first: the effect of the head's scale, and of where its logits start,
    on effectiveness and sparsity at a glance."""
    config = results.config
    datasets = list(config["datasets"])
    beir = [d for d in datasets if dataset_metric_set(config, d) == "beir"]
    shifted = any(spec["policy"] == "logit_shift" for spec in config["variants"].values())
    columns = label_columns() + [Column("factor", lambda v: f"x{v:.4g}")]
    columns += [Column("shift", lambda v: f"{v:.3g}")] if shifted else []
    columns += [Column("training")]
    primaries = {PRIMARY[dataset_metric_set(config, d)] for d in datasets}
    columns += [Column(f"mean {primaries.pop() if len(primaries) == 1 else 'primary'} ({len(datasets)})", fmt_metric)]
    columns += [Column(f"mean R@100 (BEIR, {len(beir)})", fmt_metric)] if beir else []
    columns += [Column("nnz/doc (corpora)", lambda v: f"{v:.1f}"), Column("nnz d (training)", lambda v: f"{v:.1f}"),
                Column("nnz q (training)", lambda v: f"{v:.1f}")]
    table = Table(SWEEP_TABLE, "", columns)
    variants = [v for v, spec in config["variants"].items() if spec["policy"] in SWEEP_POLICIES]
    for backbone in config["backbones"]:
        if backbone not in results.summaries:
            continue
        systems = [(backbone, v) for v in variants]
        order = sorted(range(len(systems)), key=lambda i: (-(sweep_factor(results, systems[i]) or 0.0), i))
        for system in (systems[i] for i in order):
            runs = results.runs(system)
            collapsed = sum(run_collapsed(r) for r in runs)
            if len(runs) > 1:
                training = f"{collapsed}/{len(runs)} collapsed"
            else:
                t = runs[0].get("training") or {}
                training = (f"collapsed ({t['verdict']})" if t.get("status") == COLLAPSED and t.get("verdict")
                            else t.get("status"))

            def last(key: str) -> Any:
                values = [((r.get("training") or {}).get("last_log") or {}).get(key) for r in runs]
                values = [v for v in values if v is not None]
                return sum(values) / len(values) if values else None

            row = [*system, sweep_factor(results, system), *([sweep_shift(results, system)] if shifted else []),
                   training,
                   results.value(system, lambda entry_of: primary_mean(config, {d: entry_of(d) for d in datasets}))]
            if beir:
                row.append(results.value(system, lambda entry_of: _mean_over(
                    entry_of, beir, lambda e: e["metrics"].get("R@100"))))
            row.append(results.value(system, lambda entry_of: _mean_over(
                entry_of, datasets, lambda e: (e.get("efficiency") or {}).get("mean_nnz_per_doc"))))
            row += [last("nnz_d"), last("nnz_q")]
            table.rows.append(row)
    table.caption = (
        "Head-factor sweep: per backbone, each constant or match_reference variant by the factor its MLM-head "
        "projection was multiplied by (x0.0625 = the paper's k = 16; match_reference's factor as resolved for "
        "that backbone), largest first"
        + ("; logit_shift variants at their factor, with the activation shift s of log(1 + ReLU(logit - s)) "
           "in the shift column (reference's as resolved for that backbone)" if shifted else "")
        + f". Mean of each dataset's primary metric over the {len(datasets)} "
        "datasets of this config (MRR@10 on MS MARCO dev, nDCG@10 otherwise)"
        + (f", mean R@100 over the {len(beir)} BEIR datasets" if beir else "")
        + ", mean non-zeros per document of the encoded corpora, and the last-logged non-zeros per training "
        "document and query. A collapsed run is not encoded: its effectiveness cells show 'collapsed' and its "
        "training cell says why; its training non-zeros remain. Over several seeds: means over the seeds that "
        "did not collapse (training non-zeros: over all seeds). No significance test on these means.")
    return table


def fmt_score(value: Any) -> str:
    return f"{value:.4f}"


def fmt_difference(value: Any) -> str:
    return f"{value:+.4f}"


def calibration_table(results: Results) -> Table:
    """Published models and BM25 through our chain next to their published figures.

    One row per system and dataset: our primary metric, the published figure and the
    difference (none where the figure is not published, e.g. on a subset).
    """
    columns = [Column("model"), Column("dataset"), Column("metric"), Column("ours", fmt_score),
               Column("published", fmt_score), Column("difference", fmt_difference), Column("source")]
    caption = (f"Calibration: published checkpoints (published_models) and BM25 through this pipeline's encode, "
               f"impact index, retrieval and evaluation, next to their published figures. On a full collection a "
               f"difference beyond {CALIBRATION_TOLERANCE} means our chain differs from the published one "
               "(docs/calibration.md); on a subset or pool the difference says nothing. "
               + notes_sentence(results.notes(results.config["datasets"])))
    table = Table(CALIBRATION_TABLE, caption, columns)
    for system, published in calibration_sources(results.config).items():
        for d in results.config["datasets"]:
            metric = PRIMARY[dataset_metric_set(results.config, d)]
            runs = results.bm25 if system == BM25[0] else results.published.get((system, PUBLISHED_RUN), {})
            entry = runs.get(d)
            value, figure = cell_value(entry, metric), published.get(d)
            difference = value - figure if isinstance(value, float) and figure is not None else None
            table.rows.append([system, d, metric, value, figure, difference,
                               published.get("source") if figure is not None else None])
    return table


def build_tables(config: Mapping[str, Any], summaries: Iterable[str | Path], bm25: Iterable[str | Path],
                 norms_csv: str | Path, published_metrics: Iterable[str | Path] = ()) -> list[Table]:
    results = Results(config, summaries, bm25, published_metrics)
    builders: dict[str, Callable[[], Table]] = {
        "head_norms": lambda: head_norms_table(results, Path(norms_csv)),
        "in_domain": lambda: in_domain_table(results),
        "beir": lambda: beir_table(results),
        "beir_recall": lambda: beir_recall_table(results),
        "efficiency": lambda: efficiency_table(results),
        "training": lambda: training_table(results),
        SWEEP_TABLE: lambda: factor_sweep_table(results),
        CALIBRATION_TABLE: lambda: calibration_table(results),
    }
    return [builders[name]() for name in table_names(config)]


def write_tables(config: Mapping[str, Any], summaries: Iterable[str | Path], bm25: Iterable[str | Path],
                 norms_csv: str | Path, out_dir: str | Path,
                 published_metrics: Iterable[str | Path] = ()) -> list[Path]:
    """Write every table of :func:`table_names` in all :data:`FORMATS` to ``out_dir``."""
    summaries = list(summaries)
    footer = provenance(config, (json.loads(Path(p).read_text(encoding="utf-8")) for p in summaries))
    written = []
    for table in build_tables(config, summaries, bm25, norms_csv, published_metrics):
        for ext in FORMATS:
            path = Path(out_dir) / f"{table.name}.{ext}"
            write_text(path, RENDERERS[ext](table, footer))
            written.append(path)
    return written


def run_tables(config: dict, summaries: list[Path], bm25: list[Path], norms_csv: Path, out_dir: Path,
               published_metrics: list[Path] = ()) -> list[Path]:
    """CLI stage ``splade-rescale tables``."""
    return write_tables(config, summaries, bm25, norms_csv, out_dir, published_metrics)
