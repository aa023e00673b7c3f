"""The tables and the figures of one run carry one config digest, and the footer says what it hashes.

Each job gets its own slice of the config (the tables also read notes and published figures), and a
digest of the slice printed two different digests for one run."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from splade_rescale.config import load_config
from splade_rescale.report.provenance import provenance
from splade_rescale.rule_params import figure_config, report_config


@pytest.mark.parametrize("name", ["demo", "config"])
def test_tables_and_figures_print_one_named_digest(name: str) -> None:
    config = load_config(REPO / "config" / f"{name}.yaml")
    digest = re.compile(r"\(sha256 of its experiment, backbones, variants and datasets: ([0-9a-f]{10})\)")
    tables, figures = (digest.search(provenance(part(config))) for part in (report_config, figure_config))
    assert tables and figures and tables.group(1) == figures.group(1)
    edited = {**config, "datasets": {k: {**v, "note": "edited prose"} for k, v in config["datasets"].items()}}
    assert digest.search(provenance(report_config(edited))).group(1) == tables.group(1)  # prose is not hashed
    del edited["datasets"][next(iter(edited["datasets"]))]
    assert digest.search(provenance(report_config(edited))).group(1) != tables.group(1)
