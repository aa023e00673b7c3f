"""Every masked-LM family a researcher would try goes through the one generic head: tiny random
configs (synthetic weights, a real WordPiece tokenizer over the demo triples' words) of BERT,
DistilBERT, RoBERTa, XLM-R, DeBERTa-v2, ELECTRA and ModernBERT. For each: the fused head equals the
naive log(1 + ReLU(logits)) max-pool of the model's own logits; rescaling by 1/16 divides the logits
exactly by 16 and leaves the input embeddings alone, also after a save and reload; a training step
runs; the exported model loads as a sentence-transformers SparseEncoder and gives our vectors."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest
import torch
from sentence_transformers import SparseEncoder
from transformers import AutoConfig, AutoModelForMaskedLM, BertTokenizerFast, PreTrainedModel

from conftest import TRIPLES
from splade_rescale.backbones.sources import fetch_backbone
from splade_rescale.model.heads import decoder_biases, load_masked_lm, mlm_head, scale_head
from splade_rescale.model.splade import SpladeEncoder
from splade_rescale.training.recipes import resolve_recipe
from splade_rescale.training.train import run_training
from support.training import TINY

SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
         "max_position_embeddings": 64}
FAMILIES = {  # model_type -> what its config needs beyond SIZES
    "bert": {}, "roberta": {}, "xlm-roberta": {}, "deberta-v2": {},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
    "electra": {"embedding_size": 16},  # a generator whose head projects down before its decoder
    "modernbert": {"global_attn_every_n_layers": 1, "local_attention": 16},
}
# the suite's tiny recipe, one step of two queries with no warm-up
RECIPE = {**TINY, "steps": 1, "batch_size": 2, "warmup_steps": 0, "weight_decay": 0.0, "grad_accumulation": 1,
          "flops_warmup_steps": 0, "checkpoint_every": 10}
TEXTS = ["is a little caffeine ok during pregnancy", "what fruit is native to australia",
         "The Canadian Armed Forces have about 65,000 regular members."]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> BertTokenizerFast:
    """A 200-token WordPiece vocabulary: the specials and the demo triples' most frequent words."""
    words = collections.Counter(re.findall(r"[a-z]+", Path(TRIPLES["path"]).read_text().lower()))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [w for w, _ in words.most_common(195)]
    path = tmp_path_factory.mktemp("wordpiece") / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    return BertTokenizerFast(vocab_file=str(path))


def tiny(family: str, tokenizer: BertTokenizerFast) -> PreTrainedModel:
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.cls_token_id,
           "eos_token_id": tokenizer.sep_token_id, "cls_token_id": tokenizer.cls_token_id,
           "sep_token_id": tokenizer.sep_token_id}
    config = AutoConfig.for_model(family, vocab_size=len(tokenizer), **SIZES, **ids, **FAMILIES[family])
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(config).eval()
    with torch.no_grad():  # a non-trivial bias, so that bias handling is tested
        mlm_head(model).decoder.bias.normal_(0, 0.5)
    return model


def batch(tokenizer: BertTokenizerFast) -> tuple[torch.Tensor, torch.Tensor]:
    features = tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert (features["attention_mask"] == 0).any()  # padding is masked, not pooled
    return features["input_ids"], features["attention_mask"]


@pytest.mark.parametrize("family", FAMILIES)
def test_fused_head_and_rescaling(family: str, tokenizer: BertTokenizerFast, tmp_path: Path) -> None:
    model = tiny(family, tokenizer)
    ids, mask = batch(tokenizer)
    head = mlm_head(model)
    assert head.decoder is model.get_output_embeddings() and head.is_tied()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits  # the model's own forward
        naive = torch.log1p(torch.relu(logits)).masked_fill(~mask.bool().unsqueeze(-1), 0).amax(dim=1)
        fused = SpladeEncoder(model, tokenizer, head="fused", chunk_size=64, precision="fp32")(ids, mask)
        assert torch.equal(head.logits(ids, mask), logits)
    assert (naive > 0).any() and (naive == 0).any()
    torch.testing.assert_close(fused, naive, rtol=1e-6, atol=1e-6)

    embeddings = head.input_embeddings.weight.detach().clone()
    scale_head(model, 1 / 16)
    assert not mlm_head(model).is_tied()
    assert torch.equal(mlm_head(model).input_embeddings.weight, embeddings)
    with torch.no_grad():
        # a power-of-two factor commutes exactly with every floating-point operation
        assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, logits / 16)
    model.save_pretrained(tmp_path)
    reloaded, missing = load_masked_lm(tmp_path)
    assert missing == [] and not mlm_head(reloaded).is_tied()
    assert torch.equal(mlm_head(reloaded).input_embeddings.weight, embeddings)
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(input_ids=ids, attention_mask=mask).logits, logits / 16)


@pytest.mark.parametrize("family", FAMILIES)
def test_training_step_and_sentence_transformers_export(family: str, tokenizer: BertTokenizerFast,
                                                        tmp_path: Path) -> None:
    model = tiny(family, tokenizer)
    scale_head(model, 1 / 16)  # the untied, rescaled head is what the paper's variants train
    model.save_pretrained(tmp_path / "init")
    tokenizer.save_pretrained(tmp_path / "init")
    recipe = resolve_recipe({"recipes": {"t": RECIPE}, "training": {"recipe": "t", "data": TRIPLES}}, family, "v")
    manifest = run_training(tmp_path / "init", tmp_path / "final", tmp_path / "log.csv", tmp_path / "training.json",
                            tmp_path / "ckpt", recipe, TRIPLES, device="cpu")
    assert manifest["status"] == "ok"
    final = tmp_path / "final"
    trained, _ = load_masked_lm(final)
    assert not torch.equal(mlm_head(trained).decoder.weight, mlm_head(model).decoder.weight)  # it trained

    ours = SpladeEncoder.from_pretrained(final, head="fused", device="cpu", precision="fp32").encode_batch(TEXTS, 32)
    st_model = SparseEncoder(str(final), device="cpu")
    assert [type(m).__name__ for m in st_model] == ["Transformer", "SpladePooling"]
    theirs = st_model.encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).cpu()
    assert (ours > 0).sum() > 0
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)


def test_a_checkpoint_saved_without_its_head_is_noted_and_head_init_applies(tokenizer: BertTokenizerFast,
                                                                            tmp_path: Path) -> None:
    """A RoBERTa saved from AutoModel (an embedding export): its missing head is named, and ``head_init``
    sets the transform to identity and every decoder bias tensor to the constant, by the generic head."""
    tiny("roberta", tokenizer).base_model.save_pretrained(tmp_path / "encoder")
    tokenizer.save_pretrained(tmp_path / "encoder")
    spec = {"source": "local", "path": str(tmp_path / "encoder"),
            "head_init": {"transform": "identity", "decoder_bias": -4.0}}
    manifest = fetch_backbone("encoder-only", spec, tmp_path / "out")
    assert "lm_head.dense.weight" in manifest["missing_keys"]
    assert any("identity" in note and "lm_head.dense.weight" in note for note in manifest["notes"])
    fetched, _ = load_masked_lm(tmp_path / "out" / "model")
    dense, norm = mlm_head(fetched).transform()
    assert torch.equal(dense.weight, torch.eye(32)) and torch.equal(norm.weight, torch.ones(32))
    assert all(torch.equal(b, torch.full_like(b, -4.0)) for b in decoder_biases(fetched))
