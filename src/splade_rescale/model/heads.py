"""Uniform access to the masked-LM head of the architectures the paper studies.

SPLADE reads its term weights straight from the MLM head's logits, so every stage
(norms, rescaling, training, encoding) needs the same three pieces: the encoder that
gives hidden states, the head transform (dense + activation + LayerNorm) and the
decoder (the vocabulary projection, tied to the input embeddings at pretraining).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForMaskedLM, PreTrainedModel

SUPPORTED_ARCHITECTURES = ("BertForMaskedLM", "ModernBertForMaskedLM")


class UnsupportedArchitectureError(ValueError):
    """Raised for a model whose MLM head layout this project does not know."""


@dataclass(frozen=True)
class MlmHead:
    """The parts of a masked-LM model that SPLADE uses."""

    model: PreTrainedModel
    encoder: nn.Module
    transform: nn.Module
    layer_norm: nn.LayerNorm
    decoder: nn.Linear

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    @property
    def architecture(self) -> str:
        return type(self.model).__name__

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Transformed hidden states (batch x length x hidden), the decoder's input."""
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        return self.transform(out.last_hidden_state)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.hidden_states(input_ids, attention_mask))

    def is_tied(self) -> bool:
        """Whether the decoder shares its weight storage with the input embeddings."""
        return self.decoder.weight.data_ptr() == self.input_embeddings.weight.data_ptr()


def mlm_head(model: PreTrainedModel) -> MlmHead:
    """Locate the MLM head of a BERT- or ModernBERT-style (Ettin) masked-LM model."""
    name = type(model).__name__
    if name == "BertForMaskedLM":
        predictions = model.cls.predictions
        return MlmHead(model, model.bert, predictions.transform, predictions.transform.LayerNorm,
                       predictions.decoder)
    if name == "ModernBertForMaskedLM":
        return MlmHead(model, model.model, model.head, model.head.norm, model.decoder)
    raise UnsupportedArchitectureError(
        f"architecture {name!r} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)} "
        "(add its head layout to splade_rescale/model/heads.py:mlm_head)")


def load_masked_lm(folder: str | Path) -> tuple[PreTrainedModel, list[str]]:
    """Load a masked-LM checkpoint with fp32 weights; return it with the parameter names it lacked.

    transformers 5 loads with ``dtype="auto"``: a checkpoint published in bf16 would come in,
    and train, with bf16 master weights. Every stage loads through here so that weights are
    fp32 whatever the checkpoint's dtype; bf16 comes only from autocast.
    """
    model, info = AutoModelForMaskedLM.from_pretrained(str(folder), dtype=torch.float32, output_loading_info=True)
    return model, sorted(info.get("missing_keys", []))


def weights_dtype(model: nn.Module) -> str:
    """The parameters' dtype(s) for manifests, e.g. ``float32`` (``+``-joined if mixed)."""
    return "+".join(sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()}))


def untie_decoder(model: PreTrainedModel) -> None:
    """Give the decoder its own weight so that scaling it leaves the input embeddings alone."""
    head = mlm_head(model)
    if head.is_tied():
        head.decoder.weight = nn.Parameter(head.decoder.weight.detach().clone())
    if head.architecture == "BertForMaskedLM" and head.decoder.bias is not None:
        # Untied, transformers no longer re-links decoder.bias to cls.predictions.bias on load,
        # and save_pretrained keeps only one of two shared tensors: the decoder bias would be
        # silently re-initialised. Two separate tensors with equal values both survive.
        head.decoder.bias = nn.Parameter(head.decoder.bias.detach().clone())
    model.config.tie_word_embeddings = False
    if hasattr(model.config, "get_text_config"):
        model.config.get_text_config().tie_word_embeddings = False


def scale_head(model: PreTrainedModel, factor: float) -> None:
    """Multiply the MLM-head projection (decoder weight and bias) by ``factor`` in place.

    Scaling weight and bias together makes every logit exactly ``factor`` times the
    original one. BERT keeps the decoder bias in ``cls.predictions.bias`` shared with
    ``decoder.bias``: each distinct tensor is scaled once. Factor 1 leaves the model as it
    is (still tied), so a baseline trains exactly as the standard recipe does.
    """
    if not factor > 0:
        raise ValueError(f"head scale factor must be > 0, got {factor}")
    if factor == 1.0:
        return
    untie_decoder(model)
    with torch.no_grad():
        for p in [mlm_head(model).decoder.weight, *decoder_biases(model)]:
            p.mul_(factor)


def decoder_biases(model: PreTrainedModel) -> list[nn.Parameter]:
    """The distinct tensors holding the decoder bias (none, one, or BERT's two when untied)."""
    head = mlm_head(model)
    params = [head.decoder.bias] if head.decoder.bias is not None else []
    if head.architecture == "BertForMaskedLM":
        params.append(model.cls.predictions.bias)
    distinct: dict[int, nn.Parameter] = {}
    for p in params:
        distinct.setdefault(p.data_ptr(), p)
    return list(distinct.values())


def init_identity_transform(model: PreTrainedModel, decoder_bias: float) -> None:
    """Initialise a head transform that the checkpoint lacks as identity, with a constant bias.

    all-MiniLM-L6-v2 ships only the (tied) decoder. Identity dense, LayerNorm weight 1 and
    bias 0, and a negative decoder bias make its SPLADE vectors lexical at initialisation
    (a random transform gives ~28k non-zeros of unrelated terms). This is a documented
    choice of ours, not pretrained weights.
    """
    head = mlm_head(model)
    dense = getattr(head.transform, "dense")
    with torch.no_grad():
        dense.weight.copy_(torch.eye(dense.weight.shape[0], dtype=dense.weight.dtype))
        if dense.bias is not None:
            dense.bias.zero_()
        head.layer_norm.weight.fill_(1.0)
        if head.layer_norm.bias is not None:
            head.layer_norm.bias.zero_()
        if head.decoder.bias is not None:
            head.decoder.bias.fill_(decoder_bias)
        if head.architecture == "BertForMaskedLM":
            model.cls.predictions.bias.fill_(decoder_bias)


# The activation shift s of log1p(relu(x - s)) lives in the model's config under this key, so that
# every load of an init/ or checkpoint folder applies it (SpladeEncoder, norms). The exported
# final/ folder has it folded into the decoder bias instead (fold_logit_shift) and the key at 0.
LOGIT_SHIFT_KEY = "splade_logit_shift"
FOLDED_SHIFT_KEY = "splade_logit_shift_folded"


def logit_shift(model: PreTrainedModel) -> float:
    """The activation shift the model's SPLADE logits take at every forward (0: none)."""
    return float(getattr(model.config, LOGIT_SHIFT_KEY, 0.0) or 0.0)


def set_logit_shift(model: PreTrainedModel, shift: float) -> None:
    """Record the activation shift in the model's config (saved with it)."""
    if not math.isfinite(shift):
        raise ValueError(f"logit shift must be finite, got {shift}")
    setattr(model.config, LOGIT_SHIFT_KEY, float(shift))


def fold_logit_shift(model: PreTrainedModel) -> float:
    """Move the activation shift into the decoder bias, in place; return it.

    ``log1p(relu(Wh + b - s))`` is ``log1p(relu(Wh + (b - s)))``: a model whose bias carries the
    shift gives the same vectors in any SPLADE implementation (sentence-transformers'
    SpladePooling knows no shift). A head without a bias (ModernBERT's ``decoder_bias: false``)
    gets one, and its config says so, so that it loads with it.
    """
    shift = logit_shift(model)
    if not shift:
        return 0.0
    head = mlm_head(model)
    if head.decoder.bias is None:
        head.decoder.bias = nn.Parameter(torch.zeros(head.decoder.out_features, dtype=head.decoder.weight.dtype,
                                                     device=head.decoder.weight.device))
        model.config.decoder_bias = True
    with torch.no_grad():
        for bias in decoder_biases(model):
            bias.sub_(shift)
    setattr(model.config, LOGIT_SHIFT_KEY, 0.0)
    setattr(model.config, FOLDED_SHIFT_KEY, shift)
    return shift
