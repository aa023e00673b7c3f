"""Head access, untying and exact rescaling on BERT- and ModernBERT-style heads."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForMaskedLM, DebertaV2Config, DebertaV2ForMaskedLM

from conftest import tiny_bert, tiny_modernbert
from splade_rescale.model.heads import UnsupportedArchitectureError, mlm_head, scale_head

BUILDERS = {"bert": tiny_bert, "modernbert": tiny_modernbert}


def _inputs():
    torch.manual_seed(1)
    ids = torch.randint(1000, 2000, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return ids, mask


@pytest.mark.parametrize("arch", BUILDERS)
def test_scale_head_scales_logits_exactly_and_keeps_input_embeddings(arch):
    model = BUILDERS[arch]()
    ids, mask = _inputs()
    head = mlm_head(model)
    assert head.is_tied()
    embeddings = head.input_embeddings.weight.detach().clone()
    with torch.no_grad():
        before = head.logits(ids, mask)
    scale_head(model, 1 / 16)
    head = mlm_head(model)
    assert not head.is_tied()
    assert torch.equal(head.input_embeddings.weight, embeddings)
    with torch.no_grad():
        after = head.logits(ids, mask)
    # a power-of-two factor commutes exactly with every floating-point operation
    assert torch.equal(after, before / 16)


@pytest.mark.parametrize("arch", BUILDERS)
def test_non_power_of_two_factor_scales_logits(arch):
    model = BUILDERS[arch]()
    ids, mask = _inputs()
    head = mlm_head(model)
    with torch.no_grad():
        before = head.logits(ids, mask)
        scale_head(model, 0.3)
        after = mlm_head(model).logits(ids, mask)
    torch.testing.assert_close(after, before * 0.3, rtol=1e-5, atol=1e-6)


def test_bert_shared_bias_is_scaled_once():
    model = tiny_bert()
    bias = model.cls.predictions.bias.detach().clone()
    scale_head(model, 4.0)
    assert torch.equal(model.cls.predictions.decoder.bias, bias * 4)
    assert torch.equal(model.cls.predictions.bias, bias * 4)


@pytest.mark.parametrize("arch", BUILDERS)
def test_rescaled_head_survives_save_and_reload(arch, tmp_path):
    model = BUILDERS[arch]()
    ids, mask = _inputs()
    embeddings = mlm_head(model).input_embeddings.weight.detach().clone()
    scale_head(model, 1 / 16)
    with torch.no_grad():
        expected = mlm_head(model).logits(ids, mask)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    head = mlm_head(reloaded)
    assert not head.is_tied()
    assert torch.equal(head.input_embeddings.weight, embeddings)
    with torch.no_grad():
        assert torch.equal(head.logits(ids, mask), expected)


def test_factor_must_be_positive():
    with pytest.raises(ValueError, match="must be > 0"):
        scale_head(tiny_bert(), 0.0)


def test_head_without_a_vocabulary_projection_is_refused():
    # DeBERTa-v2's non-legacy head multiplies by the input embeddings: its output embeddings are a
    # hidden x hidden transform, not a decoder
    config = DebertaV2Config(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64, legacy=False)
    with pytest.raises(UnsupportedArchitectureError, match="DebertaV2ForMaskedLM.*not a linear projection"):
        mlm_head(DebertaV2ForMaskedLM(config))


def test_factor_one_leaves_the_baseline_tied():
    model = tiny_bert()
    scale_head(model, 1.0)
    assert mlm_head(model).is_tied()
