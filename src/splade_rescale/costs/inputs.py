"""What the cost model reads: a workflow config as the Snakefile sees it and a throughputs file;
and the one error it raises when either cannot be estimated around."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from splade_rescale.config import validate_config
from splade_rescale.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
THROUGHPUTS_PATH = REPO / "config" / "throughputs.json"
THROUGHPUTS_CPU_PATH = REPO / "config" / "throughputs-cpu.json"  # + a `cpu` section (fit-throughputs)


class PlanError(ValueError):
    """A config or throughputs problem the plan cannot estimate around; one line with the fix."""


def load_throughputs(path: str | Path | None = None) -> dict[str, Any]:
    path = Path(path or THROUGHPUTS_PATH)
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PlanError(f"throughputs file {path}: {exc}; fix: pass a JSON shaped like config/throughputs.json")


def load_plan_config(path: str | Path) -> dict[str, Any]:
    """A workflow config as the Snakefile sees it: recipes merged, validated, schema defaults filled."""
    from snakemake.utils import validate

    from splade_rescale.config import SCHEMA_PATH
    from splade_rescale.training.recipes import RECIPES_PATH

    with open(path) as f:
        config = yaml.safe_load(f) or {}
    with open(RECIPES_PATH) as f:
        config["recipes"] = {**yaml.safe_load(f)["recipes"], **config.get("recipes", {})}
    try:
        validate_config(config)
    except ConfigError as exc:
        raise PlanError(f"{path}: {exc}") from None
    validate(config, str(SCHEMA_PATH))
    config.setdefault("published_models", {})
    return config
