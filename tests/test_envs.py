"""The conda environment files pin exactly what pyproject.toml pins (conda can't run here)."""

from __future__ import annotations

import tomllib

import yaml

from conftest import REPO


def test_conda_env_matches_pyproject_pins():
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert all("==" in pin for pin in pins), "every runtime dependency is pinned exactly"
    for env_file in sorted((REPO / "envs").glob("*.yaml")):
        env = yaml.safe_load(env_file.read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        listed = [p.split("#")[0].strip() for p in pip if not p.startswith("-e")]
        assert sorted(listed) == sorted(pins), env_file.name
        assert "python=3.11" in env["dependencies"]


def test_every_rule_names_the_conda_env():
    for smk in (REPO / "workflow/rules").glob("*.smk"):
        text = smk.read_text()
        assert text.count("shell:") == text.count('conda:\n        "../../envs/pipeline.yaml"'), smk.name
