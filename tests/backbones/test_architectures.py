"""An architecture without a usable masked-LM head is refused from its config.json, in one line that
names the backbone, its architecture and what is supported: by the workflow's parse (before any job)
and by the plan, never after a download."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from splade_rescale.backbones.families import TESTED, check_architecture
from splade_rescale.costs.model_shapes import check_architectures, model_shape
from splade_rescale.errors import ConfigError

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 100, "n_embd": 32,
        "n_layer": 1, "n_head": 2}


@pytest.mark.parametrize("config", [
    {"model_type": "roberta", "architectures": ["RobertaForMaskedLM"]},
    {"model_type": "bert", "architectures": ["BertModel"]},  # a sentence-transformers backbone: head added
    {"model_type": "deberta-v2"},  # DeBERTa-v3's config.json: the legacy head by default
    {"model_type": "albert", "architectures": ["AlbertForMaskedLM"]},  # untested, with a masked-LM class
])
def test_masked_lm_architectures_pass(config: dict) -> None:
    check_architecture("backbones.x", config)


@pytest.mark.parametrize("config,architecture", [
    (GPT2, "GPT2LMHeadModel (model_type gpt2)"),
    ({"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "is_encoder_decoder": True},
     "BartForConditionalGeneration (model_type bart)"),
    ({"model_type": "deberta-v2", "legacy": False}, "deberta-v2 (model_type deberta-v2)"),
])
def test_unusable_architecture_is_one_line(config: dict, architecture: str) -> None:
    with pytest.raises(ConfigError) as error:
        check_architecture("backbones.x (some/model)", config)
    message = str(error.value)
    assert message.startswith(f"backbones.x (some/model): architecture {architecture} cannot be used")
    assert f"tested: {', '.join(TESTED)}" in message and "\n" not in message


def _demo_with_backbone(tmp_path: Path, config_json: dict) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config_json))
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["backbones"]["gpt"] = {"source": "local", "path": str(folder)}
    path = tmp_path / "gpt.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_plan_and_config_check_refuse_it(tmp_path: Path) -> None:
    path = _demo_with_backbone(tmp_path, GPT2)
    config = yaml.safe_load(path.read_text())
    expected = f"backbones.gpt ({tmp_path / 'model'}): architecture GPT2LMHeadModel (model_type gpt2) cannot be used"
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        check_architectures(config)
    with pytest.raises(ConfigError, match="architecture GPT2LMHeadModel"):  # what `make plan` reads
        model_shape("gpt", config["backbones"]["gpt"])


def test_dry_run_stops_on_it_before_any_job(tmp_path: Path) -> None:
    from support.workflow import snakemake

    proc = snakemake("all", "-n", "--cores", "1", "--configfile", str(_demo_with_backbone(tmp_path, GPT2)))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    line = next(line for line in output.splitlines() if "architecture GPT2LMHeadModel" in line)
    assert "backbones.gpt" in line and "(model_type gpt2) cannot be used" in line and "tested: bert" in line
    assert "rule " not in proc.stdout  # no job was planned
