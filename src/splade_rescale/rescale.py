"""Head rescaling: the paper's fix, applied once at initialisation.

Convention: a variant's *factor* is the number the MLM-head projection (decoder weight
and bias) is multiplied by. The paper's "k = 16" is factor 1/16. The decoder is untied
from the input embeddings first, so the encoder's input is unchanged and every logit is
exactly ``factor`` times the original one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from splade_rescale.atomic import atomic_dir, write_json
from splade_rescale.config import parse_factor
from splade_rescale.heads import load_masked_lm, scale_head, weights_dtype

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
                     reference_norms_path: str | Path | None = None) -> dict[str, Any]:
    """Write ``out_dir`` (model, tokenizer, ``rescale.json``): the backbone with its head scaled."""
    def read(path: str | Path | None) -> dict[str, Any] | None:
        if path is None:
            return None
        with open(path) as f:
            return json.load(f)

    factor = resolve_factor(variant, read(backbone_norms_path), read(reference_norms_path))
    model, _ = load_masked_lm(backbone_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(backbone_dir))
    scale_head(model, factor)
    record = {"variant": variant_name, "policy": variant["policy"], "factor": factor,
              "factor_as_configured": variant.get("factor"), "reference": variant.get("reference"),
              "dtype": weights_dtype(model),
              "convention": "head projection (decoder weight and bias) multiplied by factor; k = 1/factor"}
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(Path(tmp) / "rescale.json", record)
    log.info("variant %s: head multiplied by %.6g", variant_name, factor)
    return record
