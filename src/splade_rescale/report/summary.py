"""One JSON per backbone with everything its chain produced: the single input of tables and figures.

Why: tables and figures then depend on one file per backbone (``results/summary/{backbone}.json``),
and ``snakemake results/summary/{backbone}.json`` reruns and checks one backbone's whole chain.
Files are recognised by their place in the results tree, so a stray input is an error, not ignored.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterable

from splade_rescale.atomic import write_json
from splade_rescale.runs import SEED_FOLDER

# train_log.csv columns kept as curves (figures); the last row is kept whole.
CURVE_COLUMNS = ("step", "loss", "loss_rank", "flops_q", "flops_d", "nnz_q", "nnz_d", "max_weight")
# Manifest keys copied into the summary (the recipe is reduced to its name).
MANIFEST_KEYS = ("status", "reason", "verdict", "collapse_step", "steps_done", "steps_planned", "device", "world_size",
                 "wall_s_this_run", "last_log")
# The backbone manifest's keys that say where its weights came from (a Hub revision: the commit it resolved to).
SOURCE_KEYS = ("source", "repo_id", "revision", "resolved_commit", "path", "package", "package_version")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_train_log(path: str | Path) -> dict[str, list[float | None]]:
    """The training log's curve columns (empty cells and non-numbers become None)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {col: [_number(row.get(col) or "") for row in rows] for col in CURVE_COLUMNS}


def _run_of(parts: tuple[str, ...], root: str, backbone: str) -> tuple[str, str | None] | None:
    """(variant, seed) of ``results/{root}/{backbone}/{variant}[/seed-{n}]/<file>``, else None."""
    if len(parts) >= 4 and parts[-4] == root and parts[-3] == backbone:
        return parts[-2], None
    if len(parts) >= 5 and parts[-5] == root and parts[-4] == backbone and parts[-2].startswith(SEED_FOLDER) \
            and parts[-2][len(SEED_FOLDER):].isdigit():
        return parts[-3], parts[-2][len(SEED_FOLDER):]
    return None


def _classify(path: Path, backbone: str) -> tuple[str, str | None, str | None, str | None]:
    """(kind, variant, seed, dataset) of a results file of ``backbone``, from its path."""
    parts = path.parts
    if path.name == "manifest.json" and parts[-3:-1] == ("backbones", backbone):
        return "backbone", None, None, None
    if path.suffix == ".json" and len(parts) >= 2 and parts[-2] == "norms" and path.stem == backbone:
        return "norms_backbone", None, None, None
    if path.suffix == ".json" and len(parts) >= 3 and parts[-3] == "norms" and parts[-2] == backbone:
        return "norms_variant", path.stem, None, None
    if path.name in ("manifest.json", "train_log.csv") and (run := _run_of(parts, "models", backbone)):
        return ("manifest" if path.name == "manifest.json" else "train_log"), *run, None
    if path.suffix == ".json" and (run := _run_of(parts, "metrics", backbone)):
        return "metrics", *run, path.stem
    raise ValueError(f"{path}: not a backbone manifest, norms, training or metrics file of backbone {backbone!r}")


def _metrics_entry(metrics: dict[str, Any]) -> dict[str, Any]:
    """A dataset's metrics JSON as kept in the summary: status made explicit, the run path dropped."""
    entry = {k: v for k, v in metrics.items() if k != "run"}
    entry["status"] = metrics.get("status") or ("ok" if metrics.get("metrics") is not None else "collapsed")
    return entry


def summarize_backbone(backbone: str, inputs: Iterable[str | Path], out_path: str | Path) -> dict[str, Any]:
    """Gather one backbone's source, norms, training outcomes and per-dataset metrics into ``out_path``.

    A variant trained with several seeds keeps each seed's training, curves and datasets under
    ``seeds: {seed: ...}`` (its norms stay the variant's); a one-seed variant has them itself.
    """
    summary: dict[str, Any] = {"backbone": backbone, "norms": None, "variants": {}}

    def variant(name: str) -> dict[str, Any]:
        return summary["variants"].setdefault(name, {"norms": None, "training": None, "curves": None,
                                                     "datasets": {}})

    def run(name: str, seed: str | None) -> dict[str, Any]:
        if seed is None:
            return variant(name)
        entry = variant(name)
        if "seeds" not in entry:  # the runs live under seeds, not in the variant itself
            entry = summary["variants"][name] = {"norms": entry["norms"], "seeds": {}}
        return entry["seeds"].setdefault(seed, {"training": None, "curves": None, "datasets": {}})

    for path in map(Path, inputs):
        kind, var, seed, dataset = _classify(path, backbone)
        if kind == "train_log":
            run(var, seed)["curves"] = read_train_log(path)
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        if kind == "backbone":
            summary["source"] = {k: data[k] for k in SOURCE_KEYS if data.get(k) is not None}
        elif kind == "norms_backbone":
            summary["norms"] = data
        elif kind == "norms_variant":
            variant(var)["norms"] = data
        elif kind == "manifest":
            training = {k: data.get(k) for k in MANIFEST_KEYS}
            training["recipe"] = (data.get("recipe") or {}).get("name")
            run(var, seed)["training"] = training
        else:
            run(var, seed)["datasets"][dataset] = _metrics_entry(data)
    write_json(out_path, summary, indent=1)
    return summary


def run_summary(backbone: str, inputs: list[Path], out: Path) -> dict[str, Any]:
    """CLI stage ``splade-rescale summary``."""
    return summarize_backbone(backbone, inputs, out)


def runs_of(variant: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A summary variant's training runs: one per seed, or the variant itself for one seed."""
    variant = variant or {}
    return list(variant["seeds"].values()) if variant.get("seeds") else [variant]


def seeds_of(variant: dict[str, Any] | None) -> list[str] | None:
    """A multi-seed variant's seeds as in its paths; None for a one-seed variant."""
    return list((variant or {})["seeds"]) if (variant or {}).get("seeds") else None
