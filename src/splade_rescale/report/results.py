"""The table model: a run's systems and their metrics entries (:class:`Results`), the cell and
column types every table is built from, and the config helpers they share (which variant is the
baseline, a dataset's primary metric, how a run without scores shows)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from splade_rescale.config import parse_factor
from splade_rescale.evaluation.evaluate import PRIMARY
from splade_rescale.report.seed_spread import COLLAPSED, SeedSpread, mean_per_query, over_seeds, run_collapsed
from splade_rescale.report.summary import runs_of, seeds_of
from splade_rescale.runs import PUBLISHED_RUN

MISSING = "–"
BM25 = ("BM25", MISSING)


def constant_variants(config: Mapping[str, Any]) -> dict[str, float]:
    """Variants with a constant head factor, {name: factor}, in config order."""
    return {name: parse_factor(spec["factor"]) for name, spec in config["variants"].items()
            if spec["policy"] == "constant"}


def baseline_variant(config: Mapping[str, Any]) -> str:
    """The unscaled variant significance is tested against: ``baseline``, else a constant factor 1."""
    if "baseline" in config["variants"]:
        return "baseline"
    ones = [name for name, factor in constant_variants(config).items() if factor == 1.0]
    return ones[0] if ones else next(iter(config["variants"]))


def dataset_metric_set(config: Mapping[str, Any], dataset: str) -> str:
    return config["datasets"][dataset]["metrics"]


def primary_mean(config: Mapping[str, Any], datasets: Mapping[str, Mapping[str, Any]]) -> float | str | None:
    """Mean of each dataset's primary metric over the config's datasets (None if any is missing).

    ``datasets``: {dataset: metrics entry}; an entry without scores makes the mean its status
    (``collapsed``, ``too dense``).
    """
    values = []
    for name in config["datasets"]:
        entry = datasets.get(name)
        value = cell_value(entry, PRIMARY[dataset_metric_set(config, name)])
        if isinstance(value, str):
            return value
        if value is None:
            return None
        values.append(value)
    return sum(values) / len(values) if values else None


def unscored(entry: Mapping[str, Any] | None) -> str | None:
    """Why a metrics entry has no scores: ``collapsed`` (training) or ``too dense`` (the corpus
    was estimated over the encoding budget and not indexed); None when it has scores."""
    if entry is None or (entry.get("status", "ok") == "ok" and entry.get("metrics") is not None):
        return None
    status = entry.get("status", "ok")
    return COLLAPSED if status in ("ok", COLLAPSED) else status


def cell_value(entry: Mapping[str, Any] | None, metric: str) -> float | str | None:
    """One metric of a metrics entry: a number, a status word (:func:`unscored`) or None (not evaluated)."""
    if entry is None:
        return None
    return unscored(entry) or entry["metrics"].get(metric)


def fmt_metric(value: Any) -> str:
    return f"{value:.3f}"


def fmt_general(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.3e}"
    return str(value)


@dataclass
class Column:
    label: str
    fmt: Callable[[Any], str] = fmt_general


@dataclass
class Table:
    """Raw cell values plus significance marks; every output format is rendered from it."""

    name: str
    caption: str
    columns: list[Column]
    rows: list[list[Any]] = field(default_factory=list)
    marks: dict[tuple[int, int], str] = field(default_factory=dict)
    tested_columns: set[int] = field(default_factory=set)

    def text(self, r: int, c: int) -> str:
        value = self.rows[r][c]
        if value is None:
            return MISSING
        if isinstance(value, str):
            return value
        if isinstance(value, SeedSpread):
            return value.text(self.columns[c].fmt)
        return self.columns[c].fmt(value)


class Results:
    """The systems of a run of the workflow and their metrics entries, in config order: BM25, the
    trained models, then the published checkpoints (``published_models``), untrained like BM25, so
    that every table shows the trained runs beside both."""

    def __init__(self, config: Mapping[str, Any], summaries: Iterable[str | Path], bm25: Iterable[str | Path],
                 published: Iterable[str | Path] = ()):
        self.config = config
        self.summaries = {}
        for path in summaries:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            self.summaries[data["backbone"]] = data
        self.bm25 = {Path(p).stem: json.loads(Path(p).read_text(encoding="utf-8")) for p in bm25}
        self.baseline = baseline_variant(config)
        self.reference = config["reference_backbone"]
        self.models = [(b, v) for b in config["backbones"] if b in self.summaries for v in config["variants"]]
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for path in published:
            entry = json.loads(Path(path).read_text(encoding="utf-8"))
            found.setdefault((entry["backbone"], PUBLISHED_RUN), {})[entry["dataset"]] = entry
        self.published = {(n, PUBLISHED_RUN): found[n, PUBLISHED_RUN] for n in config.get("published_models") or {}
                          if (n, PUBLISHED_RUN) in found}
        self.systems = ([BM25] if self.bm25 else []) + self.models + list(self.published)

        # several training seeds somewhere: cells are means over seeds, with a seeds column
        self.multi_seed = any(seeds_of(self.variant(m)) for m in self.models)

    def variant(self, system: tuple[str, str]) -> dict[str, Any]:
        backbone, variant = system
        return self.summaries[backbone]["variants"].get(variant, {})

    def trained(self, system: tuple[str, str]) -> bool:
        return system != BM25 and system not in self.published

    def runs(self, system: tuple[str, str]) -> list[dict[str, Any]]:
        """A system's training runs, one per seed (BM25: one, untrained)."""
        if system == BM25:
            return [{"datasets": self.bm25}]
        return [{"datasets": self.published[system]}] if system in self.published else runs_of(self.variant(system))

    def entry(self, system: tuple[str, str], dataset: str) -> dict[str, Any] | None:
        """A one-run system's metrics entry (a multi-seed system: its first seed's, for dataset notes)."""
        return self.runs(system)[0].get("datasets", {}).get(dataset)

    def value(self, system: tuple[str, str], compute: Callable[[Callable[[str], Any]], Any]) -> Any:
        """``compute(entry_of)``, ``entry_of(dataset)`` giving a run's metrics entry, over the
        system's seeds (:func:`splade_rescale.report.seed_spread.over_seeds`)."""
        return over_seeds(self.runs(system), lambda run: compute(lambda d: run.get("datasets", {}).get(d)))

    def seeds_cell(self, system: tuple[str, str]) -> str:
        """How many seeds a row's means cover: ``kept/trained``."""
        if not self.trained(system):
            return MISSING
        runs = self.runs(system)
        return f"{sum(not run_collapsed(r) for r in runs)}/{len(runs)}"

    def per_query(self, system: tuple[str, str], dataset: str, metric: str) -> dict[str, float] | None:
        """Per-query scores for significance: the run's, or averaged over the seeds that did not
        collapse; None without scores."""
        scores = []
        for run in self.runs(system):
            if run_collapsed(run):
                continue
            entry = run.get("datasets", {}).get(dataset)
            if not (isinstance(cell_value(entry, metric), float) and entry.get("per_query")):
                return None
            scores.append(entry["per_query"][metric])
        return mean_per_query(scores) if scores else None

    def datasets(self, metric_sets: Iterable[str]) -> list[str]:
        wanted = set(metric_sets)
        return [d for d in self.config["datasets"] if dataset_metric_set(self.config, d) in wanted]

    def notes(self, datasets: Iterable[str]) -> dict[str, str]:
        """Each dataset's ``note:`` from the config (prose: tables print it, no metrics file carries it)."""
        return {d: note for d in datasets if (note := self.config["datasets"][d].get("note"))}
