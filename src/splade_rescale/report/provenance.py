"""The provenance line every table and figure carries: config, code commit and package versions."""

from __future__ import annotations

import hashlib
import json
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Mapping

VERSIONED_PACKAGES = ("torch", "transformers", "pyserini", "ranx", "snakemake")


def git_commit(where: Path = Path(__file__).resolve().parent) -> str:
    """Short commit of the checkout holding this package; ``unknown`` outside git."""
    try:
        sha = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}+local-changes" if dirty else sha


def config_hash(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]


def package_versions() -> dict[str, str]:
    out = {}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def provenance(config: Mapping[str, Any]) -> str:
    """One line naming the config, code commit and package versions that made a table or figure."""
    versions = ", ".join(f"{k} {v}" for k, v in package_versions().items())
    return (f"Made by config '{config.get('experiment', '?')}' (sha256 {config_hash(config)}), "
            f"commit {git_commit()}, {versions}.")
