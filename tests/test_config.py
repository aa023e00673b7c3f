"""Config validation: both shipped configs pass; mistakes get one line naming the key."""

from __future__ import annotations

import copy

import pytest
import yaml

from conftest import REPO
from splade_rescale.config import load_config, parse_factor, validate_config, visible_device_ids
from splade_rescale.errors import ConfigError
from splade_rescale.gpus import torch_build
from splade_rescale.training.recipes import resolve_recipe


def _config(name: str) -> dict:
    config = yaml.safe_load((REPO / "config" / name).read_text())
    config["recipes"] = yaml.safe_load((REPO / "config/recipes.yaml").read_text())["recipes"]
    return config


@pytest.mark.parametrize("name", ["config.yaml", "demo.yaml"])
def test_shipped_configs_are_valid(name):
    validate_config(_config(name))


def test_paper_config_has_the_papers_experiment():
    config = _config("config.yaml")
    assert len(config["backbones"]) == 9
    assert parse_factor(config["variants"]["rescaled"]["factor"]) == 1 / 16
    beir = [d for d, spec in config["datasets"].items() if spec["metrics"] == "beir"]
    assert len(beir) == 13


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["variants"]["rescaled"].update(factor=0), r"variants.rescaled.factor = 0: .* must be > 0"),
    (lambda c: c["variants"]["rescaled"].update(factor="-1/16"), r"must be > 0"),
    (lambda c: c["variants"]["rescaled"].update(factor="sixteen"), r"expected a positive number or fraction"),
    (lambda c: c["backbones"]["minilm"].update(colour="red"), r"unknown key\(s\) 'colour' under backbones.minilm"),
    (lambda c: c.update(reference_backbone="bert"), r"reference_backbone = 'bert' is not a backbone"),
    (lambda c: c["backbones"]["minilm"].update(source="ftp"), r"backbones.minilm.source = 'ftp'"),
    (lambda c: c["backbones"]["minilm"].pop("package"), r"backbones.minilm: 'package' is a required property"),
    (lambda c: c["training"].update(recipe="nope"), r"training.recipe = 'nope' is not a recipe"),
    (lambda c: c["training"].update(overrides={"bert": {}}), r"training.overrides.bert: unknown backbone"),
    (lambda c: c["encoding"].update(doc_max_length=-5), r"encoding.doc_max_length = -5"),
    (lambda c: c["datasets"]["scifact"].update(metrics="bleu"), r"datasets.scifact.metrics = 'bleu'"),
    (lambda c: c["backbones"]["minilm"].update(max_length=16), r"encoding.query_max_length = 32 exceeds"),
    (lambda c: c["backbones"].update(bm25=c["backbones"]["minilm"]), r"'bm25' is reserved"),
    # closed sections: a misspelt key would otherwise be part of every training's or search's params
    (lambda c: c["training"]["data"].update(nagatives="bm25"), r"unknown key\(s\) 'nagatives' under training.data"),
    (lambda c: c["datasets"]["scifact"].update(exclude_slef=False),
     r"unknown key\(s\) 'exclude_slef' under datasets.scifact"),
])
def test_config_errors_are_one_line_and_name_the_key(mutate, message):
    config = copy.deepcopy(_config("demo.yaml"))
    mutate(config)
    with pytest.raises(ConfigError, match=message) as info:
        validate_config(config)
    assert "\n" not in str(info.value)


def test_recipe_overrides_per_backbone_and_variant():
    config = _config("demo.yaml")
    base = resolve_recipe(config, "minilm", "rescaled")
    config["training"]["overrides"] = {"minilm": {"lr": 1.0, "rescaled": {"steps": 3}}}
    assert resolve_recipe(config, "minilm", "rescaled")["steps"] == 3
    assert resolve_recipe(config, "minilm", "rescaled")["lr"] == 1.0
    assert resolve_recipe(config, "minilm", "baseline")["steps"] == base["steps"]
    assert resolve_recipe(config, "minilm-x16", "rescaled") == base
    config["training"]["overrides"] = {"minilm": {"rescaled": {"stepz": 3}}}
    with pytest.raises(ConfigError, match="training.overrides.minilm.rescaled: unknown recipe key"):
        resolve_recipe(config, "minilm", "rescaled")


def test_load_config_reads_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_config("demo.yaml")))
    assert load_config(path)["experiment"] == "demo"


def test_an_old_results_layout_is_refused_in_one_line(tmp_path):
    from splade_rescale.config import check_results_layout

    results = tmp_path / "results"
    (results / "demo" / "models").mkdir(parents=True)  # the new layout: an experiment's folder
    check_results_layout(results)
    (results / "models").mkdir()  # the old layout: one experiment's outputs at the top
    with pytest.raises(ConfigError) as err:
        check_results_layout(results)
    assert "results/models/ is a run of the old layout" in str(err.value) and "\n" not in str(err.value)


def test_an_experiment_cannot_be_named_like_a_results_folder():
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["experiment"] = "models"
    with pytest.raises(ConfigError, match=r"experiment = 'models'"):
        validate_config(config)


def test_visible_device_ids_as_cuda_reads_them(tmp_path):
    # synthetic /dev folders: a container given the host's GPUs 2 and 5 keeps /dev/nvidia2 and
    # /dev/nvidia5, and CUDA calls them 0 and 1 (CUDA_VISIBLE_DEVICES=2 there finds no GPU)
    for name in ("nvidia2", "nvidia5", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert visible_device_ids({}, tmp_path) == ["0", "1"]
    (tmp_path / "nvidia10").touch()
    assert visible_device_ids({}, tmp_path) == ["0", "1", "2"]
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": "3, 1"}, tmp_path) == ["3", "1"]  # the variable wins
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": "2,-1,3"}, tmp_path) == ["2"]  # -1 hides the rest
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": ""}, tmp_path) == []
    gpu_uuid = "GPU-8f6e1c2a-0000-1111-2222-333344445555"
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": gpu_uuid}, tmp_path) == [gpu_uuid]


def test_wsl2_without_device_files_is_one_gpu_not_none(tmp_path):
    # synthetic WSL2: /dev/dxg and NVIDIA's driver in /usr/lib/wsl/lib, no /dev/nvidiaN
    dev, driver = tmp_path / "dev", tmp_path / "libcuda.so"
    dev.mkdir()
    (dev / "dxg").touch()
    assert visible_device_ids({}, dev, driver) == []  # dxg without NVIDIA's driver: not a CUDA GPU
    driver.touch()
    assert visible_device_ids({}, dev, driver) == ["0"]  # one pool id: GPU jobs one at a time on GPU 0
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": "0,1"}, dev, driver) == ["0", "1"]


def test_torch_build_is_read_without_importing_torch():
    import subprocess
    import sys

    code = ("import sys; from splade_rescale.gpus import torch_build; b = torch_build();"
            "print(b['version'], b['cuda'], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    import torch

    assert out == [torch.__version__, str(torch.version.cuda), "False"]
    assert torch_build() == {"version": torch.__version__, "cuda": torch.version.cuda}


def test_the_cores_that_feed_the_gpus_of_the_paper_run():
    """8 cores hold a thread for each of 8 GPU jobs, but the indexes and searches each GPU-hour leaves
    (the bill's ratio) keep only about half the GPUs busy: the run's first lines say so and name the
    --cores that feeds all 8."""
    from splade_rescale.config import gpus_fed
    from splade_rescale.costs.plan import build_plan, load_throughputs
    config = load_config(REPO / "config/config.yaml")
    totals = build_plan(config, load_throughputs())["totals"]
    ratio = (totals["index_core_h"] + totals["retrieve_core_h"]) / (totals["train_gpu_h"] + totals["encode_gpu_h"])
    eight = gpus_fed(config, 8, 8, ratio)
    assert eight["at_once"] == 8 and eight["busy"] < 8 and 8 < eight["cores_for_all"] <= 64
    assert gpus_fed(config, eight["cores_for_all"], 8, ratio)["busy"] == 8
    assert gpus_fed(config, 64, 8, ratio) == {"at_once": 8, "busy": 8, "cores_for_all": 64}
    assert gpus_fed(config, 8, 1, ratio) == {"at_once": 1, "busy": 1, "cores_for_all": 8}
    assert gpus_fed(config, 4, 8, ratio)["at_once"] == 4  # fewer cores than GPUs: one thread per GPU job
