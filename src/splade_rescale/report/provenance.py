"""The provenance line every table and figure carries: config, code commit, package versions and where
each backbone's weights came from (a Hub backbone: the commit its revision resolved to when fetched)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterable, Mapping

from splade_rescale.rule_params import figure_config

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


HASHED = "experiment, backbones, variants and datasets"  # what config_hash covers, as the footer names it


def config_hash(config: Mapping[str, Any]) -> str:
    """SHA-256 of the config sections every table and figure is made from (:data:`HASHED`), so that the
    tables, given more of the config than the figures (notes, published figures), print the same digest."""
    return hashlib.sha256(json.dumps(figure_config(config), sort_keys=True).encode()).hexdigest()[:10]


def package_versions() -> dict[str, str]:
    out = {}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def backbone_source(name: str, source: Mapping[str, Any]) -> str:
    """``name repo@commit`` (12 hex digits; the summary holds all 40), ``name package version`` or ``name source``."""
    if source.get("resolved_commit"):
        return f"{name} {source['repo_id']}@{source['resolved_commit'][:12]}"
    if source.get("package"):
        return f"{name} {source['package']} {source.get('package_version') or ''}".rstrip()
    return f"{name} {source.get('source', '?')}"


def provenance(config: Mapping[str, Any], summaries: Iterable[Mapping[str, Any]] = ()) -> str:
    """One line naming the config, code commit, package versions and backbone sources behind a table or figure."""
    versions = ", ".join(f"{k} {v}" for k, v in package_versions().items())
    sources = ", ".join(backbone_source(s["backbone"], s["source"]) for s in summaries if s.get("source"))
    return (f"Made by config '{config.get('experiment', '?')}' (sha256 of its {HASHED}: {config_hash(config)}), "
            f"commit {git_commit()}, {versions}" + (f"; backbones: {sources}." if sources else "."))
