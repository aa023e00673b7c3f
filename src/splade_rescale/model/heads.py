"""The masked-LM head of any ``AutoModelForMaskedLM``, found one way.

SPLADE reads its term weights from the MLM logits, so every stage needs the decoder (the vocabulary
projection, ``get_output_embeddings()``) and its input (the transformed hidden states), taken by a
pre-hook on the decoder that stops the model's own forward there: no attribute names, no B x L x V logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForMaskedLM, PreTrainedModel

# model_type -> the config key that gives the decoder a bias, for a head saved without one
# (fold_logit_shift adds it). Families that always have a decoder bias need no entry.
BIAS_CONFIG_KEYS = {"modernbert": "decoder_bias"}


class UnsupportedArchitectureError(ValueError):
    """Raised for a model whose MLM head SPLADE cannot use."""


class _DecoderInput(Exception):
    """Carries the decoder's input (``args[0]``) out of the model's forward."""


@dataclass(frozen=True)
class MlmHead:
    """The parts of a masked-LM model that SPLADE uses."""

    model: PreTrainedModel
    decoder: nn.Linear

    @property
    def encoder(self) -> nn.Module:
        """The backbone without its head (what torch.compile compiles)."""
        return self.model.base_model

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    @property
    def architecture(self) -> str:
        return type(self.model).__name__

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Transformed hidden states (batch x length x hidden), the decoder's input."""
        def stop(module: nn.Module, args: tuple) -> None:
            raise _DecoderInput(args[0])

        handle = self.decoder.register_forward_pre_hook(stop)
        try:
            self.model(input_ids=input_ids, attention_mask=attention_mask)
        except _DecoderInput as found:
            return found.args[0]
        finally:
            handle.remove()
        raise UnsupportedArchitectureError(f"{self.architecture}: its forward never calls its output embeddings "
                                           "(get_output_embeddings()); SPLADE cannot read its logits")

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return self.decoder(self.hidden_states(input_ids, attention_mask))

    def is_tied(self) -> bool:
        """Whether the decoder shares its weight storage with the input embeddings."""
        return self.decoder.weight.data_ptr() == self.input_embeddings.weight.data_ptr()

    def transform(self) -> list[nn.Module]:
        """The head's own layers, the backbone's output to the decoder's input (none: a head without one)."""
        outside = {id(m) for m in (*self.encoder.modules(), self.decoder)}
        return [m for m in self.model.modules() if id(m) not in outside and next(m.children(), None) is None]


def mlm_head(model: PreTrainedModel) -> MlmHead:
    """The head of a masked-LM model: its decoder is its output embeddings, a linear vocabulary projection."""
    decoder = model.get_output_embeddings()
    if not isinstance(decoder, nn.Linear) or decoder.out_features != model.config.get_text_config().vocab_size:
        raise UnsupportedArchitectureError(
            f"architecture {type(model).__name__!r}: its output embeddings ({type(decoder).__name__}) are not a linear "
            "projection onto the vocabulary (DeBERTa-v2 with legacy: false is one such); SPLADE needs one")
    return MlmHead(model, decoder)


def load_masked_lm(folder: str | Path) -> tuple[PreTrainedModel, list[str]]:
    """Load a masked-LM checkpoint with fp32 weights (whatever its dtype: transformers 5 loads with
    ``dtype="auto"``, and bf16 master weights would train); return it with the parameter names it lacked."""
    model, info = AutoModelForMaskedLM.from_pretrained(str(folder), dtype=torch.float32, output_loading_info=True)
    return model, sorted(info.get("missing_keys", []))


def weights_dtype(model: nn.Module) -> str:
    """The parameters' dtype(s) for manifests, e.g. ``float32`` (``+``-joined if mixed)."""
    return "+".join(sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()}))


def decoder_biases(model: PreTrainedModel) -> list[nn.Parameter]:
    """The distinct tensors holding the decoder bias: the decoder's, and a vocabulary-sized ``bias`` its
    parent module keeps apart (BERT's and RoBERTa's heads; one tensor until untied)."""
    decoder = mlm_head(model).decoder
    parent = next(m for m in model.modules() if any(c is decoder for c in m.children()))
    params = [p for p in (decoder.bias, getattr(parent, "bias", None))
              if isinstance(p, nn.Parameter) and p.shape == (decoder.out_features,)]
    return [p for i, p in enumerate(params) if all(p.data_ptr() != q.data_ptr() for q in params[:i])]


def untie_decoder(model: PreTrainedModel) -> None:
    """Give the decoder its own weight so that scaling it leaves the input embeddings alone."""
    head = mlm_head(model)
    if head.is_tied():
        head.decoder.weight = nn.Parameter(head.decoder.weight.detach().clone())
    if head.decoder.bias is not None:
        # Untied, a bias kept apart (BERT's, RoBERTa's) is no longer re-linked on load and save_pretrained
        # keeps one of two shared tensors: two separate tensors with equal values both survive.
        head.decoder.bias = nn.Parameter(head.decoder.bias.detach().clone())
    model.config.tie_word_embeddings = model.config.get_text_config().tie_word_embeddings = False


def scale_head(model: PreTrainedModel, factor: float) -> None:
    """Multiply the decoder weight and each distinct bias tensor by ``factor`` in place: every logit is
    exactly ``factor`` times the original one. Factor 1 leaves the model as it is (still tied), so a
    baseline trains exactly as the standard recipe does."""
    if not factor > 0:
        raise ValueError(f"head scale factor must be > 0, got {factor}")
    if factor == 1.0:
        return
    untie_decoder(model)
    with torch.no_grad():
        for p in [mlm_head(model).decoder.weight, *decoder_biases(model)]:
            p.mul_(factor)


def init_identity_transform(model: PreTrainedModel, decoder_bias: float) -> None:
    """Initialise a head transform that the checkpoint lacks (all-MiniLM-L6-v2 ships only the tied decoder)
    as identity (linear = I, norm weight 1, biases 0) with a constant decoder bias: a negative one makes the
    vectors lexical at initialisation, where a random transform gives ~28k non-zeros of unrelated terms.
    A documented choice of ours, not pretrained weights."""
    with torch.no_grad():
        for module in mlm_head(model).transform():
            weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
            if isinstance(module, nn.Linear):
                weight.copy_(torch.eye(*weight.shape, dtype=weight.dtype))
            elif weight is not None:
                weight.fill_(1.0)
            if bias is not None:
                bias.zero_()
        for bias in decoder_biases(model):
            bias.fill_(decoder_bias)


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
    """Move the activation shift into the decoder bias, in place; return it. ``log1p(relu(Wh + b - s))`` is
    ``log1p(relu(Wh + (b - s)))``, so the model gives the same vectors in any SPLADE implementation
    (sentence-transformers' knows no shift). A head without a bias (ModernBERT's ``decoder_bias: false``)
    gets one, and its config (BIAS_CONFIG_KEYS) says so, so that it loads with it."""
    shift = logit_shift(model)
    if not shift:
        return 0.0
    decoder = mlm_head(model).decoder
    if decoder.bias is None:
        if model.config.model_type not in BIAS_CONFIG_KEYS:
            raise UnsupportedArchitectureError(f"{type(model).__name__}: no decoder bias to fold the logit shift "
                                               f"into (known how to add one: {', '.join(BIAS_CONFIG_KEYS)})")
        decoder.bias = nn.Parameter(decoder.weight.new_zeros(decoder.out_features))
        setattr(model.config, BIAS_CONFIG_KEYS[model.config.model_type], True)
    with torch.no_grad():
        for bias in decoder_biases(model):
            bias.sub_(shift)
    setattr(model.config, LOGIT_SHIFT_KEY, 0.0)
    setattr(model.config, FOLDED_SHIFT_KEY, shift)
    return shift
