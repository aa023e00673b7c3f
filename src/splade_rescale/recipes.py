"""Training recipes: named presets (config/recipes.yaml) plus per-backbone/variant overrides.

Kept free of torch so that the Snakefile can resolve a job's recipe cheaply at DAG time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from splade_rescale.config import ConfigError

RECIPES_PATH = Path(__file__).resolve().parents[2] / "config" / "recipes.yaml"
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
    # Sparsity verdict, made once at the end of training (see splade_rescale.train): collapsed when
    # the mean non-zeros per query or document over the last collapse_window steps after the FLOPS
    # warm-up is below collapse_min_nnz (all-zero) or above collapse_dense_fraction x vocab (near-dense).
    "collapse_min_nnz": 1.0,
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
    """The recipe named by ``training.recipe`` with ``training.overrides`` applied.

    Overrides: ``{backbone: {key: value}}`` applies to all variants of a backbone,
    ``{backbone: {variant: {key: value}}}`` to one variant (the more specific wins).
    Recipes come from ``config["recipes"]`` or else ``config/recipes.yaml``.
    """
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
    variant_names = set(config.get("variants", {}))
    per_variant = {k: v for k, v in per_backbone.items() if k in variant_names}
    backbone_level = {k: v for k, v in per_backbone.items() if k not in variant_names}
    check_recipe_keys(backbone_level, f"training.overrides.{backbone}")
    recipe.update(backbone_level)
    own = per_variant.get(variant) or {}
    check_recipe_keys(own, f"training.overrides.{backbone}.{variant}")
    recipe.update(own)
    recipe["name"] = name
    return recipe
