"""Variant initial models: the paper's fix (head rescaling) and the two it is compared with.

Convention: a variant's *factor* is the number the MLM-head projection (decoder weight
and bias) is multiplied by. The paper's "k = 16" is factor 1/16. The decoder is untied
from the input embeddings first, so the encoder's input is unchanged and every logit is
exactly ``factor`` times the original one. A ``logit_shift`` variant keeps the head (times its
factor, default 1) and records an activation shift s, ``log(1 + ReLU(logit - s))`` at every
forward; a ``vocab_transfer`` one moves the backbone to another vocabulary.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from splade_rescale.atomic import atomic_dir, write_json
from splade_rescale.config import parse_factor
from splade_rescale.model.heads import load_masked_lm, scale_head, set_logit_shift, weights_dtype

log = logging.getLogger(__name__)

NORM_KEYS = {"mean_row": "decoder_row_norm_mean", "frobenius": "decoder_frobenius_norm"}


def resolve_factor(variant: dict[str, Any], backbone_norms: dict[str, Any] | None = None,
                   reference_norms: dict[str, Any] | None = None) -> float:
    """The factor a variant asks for: a constant, or the one that matches a reference's head norm.

    ``match_reference`` compares mean decoder row norms by default (comparable across
    vocabulary sizes); ``norm: frobenius`` compares whole-matrix norms instead.
    """
    if variant["policy"] == "constant":
        return parse_factor(variant["factor"])
    if backbone_norms is None or reference_norms is None:
        raise ValueError("policy match_reference needs the norms of the backbone and of the reference")
    key = NORM_KEYS[variant.get("norm", "mean_row")]
    return reference_norms[key] / backbone_norms[key]


def rescale_backbone(backbone_dir: str | Path, out_dir: str | Path, variant_name: str, variant: dict[str, Any],
                     backbone_norms_path: str | Path | None = None,
                     reference_norms_path: str | Path | None = None,
                     probe: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``out_dir`` (model, tokenizer, ``rescale.json``): the backbone with its head scaled,
    or, for ``vocab_transfer``, moved to the variant's tokenizer first (which ``out_dir`` then holds)."""
    def read(path: str | Path | None) -> dict[str, Any] | None:
        if path is None:
            return None
        with open(path) as f:
            return json.load(f)

    model, _ = load_masked_lm(backbone_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(backbone_dir))
    transfer = shift = None
    if variant["policy"] == "vocab_transfer":
        model, tokenizer, transfer = _transfer(model, tokenizer, variant_name, variant,
                                               read(reference_norms_path), probe)
        factor = parse_factor(variant.get("factor", 1))
    elif variant["policy"] == "logit_shift":
        factor = parse_factor(variant.get("factor", 1))
    else:
        factor = resolve_factor(variant, read(backbone_norms_path), read(reference_norms_path))
    scale_head(model, factor)
    if variant["policy"] == "logit_shift":  # the shift applies to the scaled logits
        shift = _logit_shift(model, tokenizer, variant_name, variant, read(reference_norms_path), probe)
        set_logit_shift(model, shift["shift"])
    record = {"variant": variant_name, "policy": variant["policy"], "factor": factor,
              "factor_as_configured": variant.get("factor"), "reference": variant.get("reference"),
              "dtype": weights_dtype(model),
              "convention": "head projection (decoder weight and bias) multiplied by factor; k = 1/factor"}
    if transfer is not None:
        record["vocab_transfer"] = transfer
    if shift is not None:
        record["logit_shift"] = shift
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(Path(tmp) / "rescale.json", record)
    log.info("variant %s: head multiplied by %.6g%s", variant_name, factor,
             f", logits shifted by -{shift['shift']:.6g}" if shift else "")
    return record


def _logit_shift(model, tokenizer, name: str, variant: dict[str, Any], reference_norms: dict[str, Any] | None,
                 probe: dict[str, Any] | None) -> dict[str, Any]:
    """The variant's activation shift s: the configured number, or for ``reference`` the s at which the
    probe passages' mean active terms equal the reference backbone's (vocabulary transfer's bisection)."""
    from splade_rescale.model.norms import read_probe_texts
    from splade_rescale.model.vocab_transfer import mean_active, passage_max_logits, shift_for_target

    if variant["shift"] != "reference":
        return {"shift": float(variant["shift"]), "shift_as_configured": variant["shift"]}
    if reference_norms is None or probe is None:
        raise ValueError(f"variants.{name}.shift = reference needs the reference backbone's norms "
                         "(--reference-norms) and the probe passages (--probe)")
    target = float(reference_norms["passages"]["mean_nonzeros"])
    max_logits = passage_max_logits(model, tokenizer, read_probe_texts(probe["passages"]),
                                    probe.get("passage_max_length", 128))
    shift = 0.0 - shift_for_target(max_logits, target)  # not -0.0 where no shift is needed
    return {"shift": shift, "shift_as_configured": "reference", "target_nnz": target,
            "target_from": "the reference backbone's probe passages", "passages": int(max_logits.shape[0]),
            "passages_nnz_unshifted": mean_active(max_logits), "passages_nnz_shifted": mean_active(max_logits, -shift)}


def _transfer(model, tokenizer, name: str, variant: dict[str, Any], reference_norms: dict[str, Any] | None,
              probe: dict[str, Any] | None):
    """The backbone over the variant's vocabulary, its bias shifted if asked: (model, tokenizer, record)."""
    from splade_rescale.model.norms import read_probe_texts
    from splade_rescale.model.vocab_transfer import fit_bias_shift, resolve_target_nnz, transfer_vocabulary
    from splade_rescale.tokenizers import load_tokenizer

    target = load_tokenizer(variant["tokenizer"], f"variants.{name}.tokenizer")
    target_nnz = resolve_target_nnz(variant, reference_norms)
    model, record = transfer_vocabulary(model, tokenizer, target, needs_bias=target_nnz is not None)
    record["tokenizer"] = dict(variant["tokenizer"])
    record["bias_shift"] = None
    if target_nnz is not None:
        if probe is None:
            raise ValueError(f"variants.{name}.target_nnz needs the probe passages (--probe)")
        if target_nnz > len(target):
            raise ValueError(f"variants.{name}.target_nnz = {target_nnz:g} exceeds the vocabulary "
                             f"({len(target)} tokens); fix: a number of active terms <= {len(target)}")
        passages = read_probe_texts(probe["passages"])
        record["bias_shift"] = {
            **fit_bias_shift(model, target, passages, probe.get("passage_max_length", 128), target_nnz),
            "target_from": ("the reference backbone's probe passages"
                            if variant["target_nnz"] == "reference" else "the config")}
    return model, target, record
