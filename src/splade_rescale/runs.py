"""Run names: the path component of one trained (or published) model under results/<experiment>/.

A training seed is one full chain (train, encode, index, retrieve, evaluate) per seed of a variant.
Why: one run per variant cannot tell a backbone that always collapses from one that collapsed
once, nor a 0.01 difference from seed noise. A run is named by its variant alone when the
variant has one seed, so a one-seed config keeps every path and table it had before seeds
existed; with several seeds each run is ``{variant}/seed-{n}`` (a folder under the variant's,
beside the seed-independent ``init/``). Torch-free: the Snakefile names runs at DAG time.
"""

from __future__ import annotations

import re
from typing import Any

from splade_rescale.errors import ConfigError

PUBLISHED_RUN = "published"  # results/{experiment}/models/{name}/published/: no norms, rescaling or training
SEED_FOLDER = "seed-"
VARIANT_PATTERN = r"[A-Za-z0-9_.-]+"
# a run: a variant, or a variant's seed folder (the `variant` wildcard of the per-run rules)
RUN_PATTERN = VARIANT_PATTERN + r"(/" + SEED_FOLDER + r"[0-9]+)?"


def run_name(variant: str, seed: int, n_seeds: int) -> str:
    """The run's path component: the variant alone for a one-seed variant."""
    return variant if n_seeds == 1 else f"{variant}/{SEED_FOLDER}{seed}"


def split_run(run: str) -> tuple[str, int | None]:
    """(variant, seed) of a run name; seed None for a one-seed variant's run."""
    match = re.fullmatch(rf"({VARIANT_PATTERN})/{SEED_FOLDER}([0-9]+)", run)
    return (match.group(1), int(match.group(2))) if match else (run, None)


def check_seeds(value: Any, key: str) -> list[int]:
    """A non-empty list of distinct non-negative integers, else one line naming ``key``."""
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{key} = {value!r}: expected a non-empty list of integers, e.g. [0, 1, 2]")
    bad = [s for s in value if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad:
        raise ConfigError(f"{key}: {bad[0]!r} is not a non-negative integer seed")
    repeated = sorted({s for s in value if value.count(s) > 1})
    if repeated:
        raise ConfigError(f"{key} = {value}: seed(s) {', '.join(map(str, repeated))} repeated; "
                          "each seed is one training run, list it once")
    return list(value)
