"""Training recipes: named presets (config/recipes.yaml) plus per-backbone/variant overrides.

Kept free of torch so that the Snakefile can resolve a job's recipe cheaply at DAG time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from splade_rescale.errors import ConfigError
from splade_rescale.runs import SEED_FOLDER, check_seeds, run_name, split_run

RECIPES_PATH = Path(__file__).resolve().parents[3] / "config" / "recipes.yaml"
REQUIRED_KEYS = ("steps", "batch_size", "negatives_per_query", "lr", "warmup_steps", "weight_decay",
                 "max_grad_norm", "grad_accumulation", "query_max_length", "doc_max_length", "lambda_q",
                 "lambda_d", "flops_warmup_steps", "temperature", "precision", "head", "log_every",
                 "checkpoint_every", "seed")
OPTIONAL_DEFAULTS: dict[str, Any] = {
    "loss": "contrastive",          # contrastive | margin_mse | kl (the last two need teacher_scores)
    "teacher_scores": None,         # qid<TAB>docid<TAB>score file
    "chunk_size": 8192,             # vocabulary chunk of the fused head
    "shuffle_buffer": 10_000,
    "keep_checkpoints": 2,
    # Sparsity verdict, judged on a finished run (splade_rescale.training.verdict, rule judge_training): collapsed when
    # the mean non-zeros per query or document over the last collapse_window steps after the FLOPS
    # warm-up is below collapse_min_nnz (all-zero), below collapse_near_empty_q / _d (near-empty: a
    # handful of terms; SPLADE++ keeps ~20-40 per query and 100-200 per passage) or above
    # collapse_dense_fraction x vocab (near-dense).
    "collapse_min_nnz": 1.0,
    "collapse_near_empty_q": 4.0,
    "collapse_near_empty_d": 16.0,
    "collapse_dense_fraction": 0.5,
    "collapse_window": 100,
    "source": None,                 # where the values come from (documentation only)
}
RECIPE_KEYS = frozenset(REQUIRED_KEYS) | frozenset(OPTIONAL_DEFAULTS)


class TrainingConfigError(ConfigError):
    """A recipe or override problem, in one line naming the key and the fix."""


def check_recipe_keys(values: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(values) - RECIPE_KEYS)
    if unknown:
        raise TrainingConfigError(f"{where}: unknown recipe key(s) {', '.join(unknown)}; "
                                  f"expected among: {', '.join(sorted(RECIPE_KEYS))}")


def resolve_recipe(config: Mapping[str, Any], backbone: str, variant: str) -> dict[str, Any]:
    """The recipe named by ``training.recipe`` with ``training.overrides`` applied, for one run.

    Overrides: ``{backbone: {key: value}}`` applies to all variants of a backbone,
    ``{backbone: {variant: {key: value}}}`` to one variant (the more specific wins).
    Recipes come from ``config["recipes"]`` or else ``config/recipes.yaml``. ``variant`` may
    be a run (``{variant}/seed-{n}``, :mod:`splade_rescale.runs`): its seed replaces the
    recipe's, and ``{backbone: {variant: {seed-{n}: {key: value}}}}`` applies to that seed
    alone (most specific); a one-seed variant's run takes its one seed.
    """
    variant, seed = split_run(variant)
    recipe = _overridden_recipe(config, backbone, variant)
    if seed is None:
        seeds = training_seeds(config, backbone, variant, recipe["seed"])
        seed = seeds[0] if len(seeds) == 1 else None
    if seed is not None:
        recipe["seed"] = seed
        key = f"{SEED_FOLDER}{seed}"
        per_seed = dict(_variant_overrides(config, backbone, variant).get(key) or {})
        check_recipe_keys(per_seed, f"training.overrides.{backbone}.{variant}.{key}")
        recipe.update(per_seed)
    return recipe


def _variant_overrides(config: Mapping[str, Any], backbone: str, variant: str) -> dict[str, Any]:
    per_backbone = config["training"].get("overrides", {}).get(backbone) or {}
    return dict(per_backbone.get(variant) or {}) if variant in config.get("variants", {}) else {}


def training_seeds(config: Mapping[str, Any], backbone: str, variant: str,
                   recipe_seed: int | None = None) -> list[int]:
    """The seeds one backbone x variant is trained with: ``training.overrides`` (variant, then
    backbone level) ``seeds``, else ``training.seeds``, else the recipe's own seed."""
    per_backbone = dict(config["training"].get("overrides", {}).get(backbone) or {})
    own = _variant_overrides(config, backbone, variant)
    for key, value in ((f"training.overrides.{backbone}.{variant}.seeds", own.get("seeds")),
                       (f"training.overrides.{backbone}.seeds", per_backbone.get("seeds")),
                       ("training.seeds", config["training"].get("seeds"))):
        if value is not None:
            return check_seeds(value, key)
    if recipe_seed is None:
        recipe_seed = _overridden_recipe(config, backbone, variant)["seed"]
    return [int(recipe_seed)]


def seed_runs(config: Mapping[str, Any], backbone: str, variant: str) -> list[str]:
    """The run names of one backbone x variant, one per seed (the variant alone for one seed).

    A per-seed override (``training.overrides.{backbone}.{variant}.seed-{n}``) must name one of
    the variant's seeds: a typo would otherwise be silently ignored.
    """
    seeds = training_seeds(config, backbone, variant)
    for key in _variant_overrides(config, backbone, variant):
        if key.startswith(SEED_FOLDER) and key[len(SEED_FOLDER):] not in {str(s) for s in seeds}:
            raise TrainingConfigError(f"training.overrides.{backbone}.{variant}.{key}: not one of this variant's "
                                      f"seeds ({', '.join(map(str, seeds))}); fix the seed or training.seeds")
    return [run_name(variant, seed, len(seeds)) for seed in seeds]


def _overridden_recipe(config: Mapping[str, Any], backbone: str, variant: str) -> dict[str, Any]:
    recipes = config.get("recipes")
    if not recipes:
        with open(RECIPES_PATH) as f:
            recipes = yaml.safe_load(f)["recipes"]
    name = config["training"]["recipe"]
    if name not in recipes:
        raise TrainingConfigError(f"training.recipe = {name!r} is not in config/recipes.yaml; "
                                  f"expected one of: {', '.join(recipes)}")
    recipe = {**OPTIONAL_DEFAULTS, **recipes[name]}
    check_recipe_keys(recipes[name], f"recipes.{name}")
    missing = [k for k in REQUIRED_KEYS if k not in recipe]
    if missing:
        raise TrainingConfigError(f"recipes.{name}: missing key(s) {', '.join(missing)}")
    per_backbone = dict(config["training"].get("overrides", {}).get(backbone) or {})
    per_backbone.pop("seeds", None)  # which runs exist, not a recipe key (training_seeds)
    variant_names = set(config.get("variants", {}))
    per_variant = {k: v for k, v in per_backbone.items() if k in variant_names}
    backbone_level = {k: v for k, v in per_backbone.items() if k not in variant_names}
    check_recipe_keys(backbone_level, f"training.overrides.{backbone}")
    recipe.update(backbone_level)
    own = {k: v for k, v in (per_variant.get(variant) or {}).items()
           if k != "seeds" and not k.startswith(SEED_FOLDER)}  # seed-{n}: resolve_recipe, for that seed
    check_recipe_keys(own, f"training.overrides.{backbone}.{variant}")
    recipe.update(own)
    recipe["name"] = name
    return recipe
