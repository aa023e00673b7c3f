"""Which masked-LM architectures the pipeline can use, read from a model's ``config.json`` before any job.

Any ``AutoModelForMaskedLM`` whose output embeddings are its vocabulary projection works through the
one generic head (:func:`splade_rescale.model.heads.mlm_head`); the families below are the ones the
tests run. What is refused here would otherwise fail only after a download, in the middle of a run.
"""

from __future__ import annotations

from typing import Any, Mapping

from splade_rescale.errors import ConfigError

TESTED = ("bert", "distilbert", "roberta", "xlm-roberta", "deberta-v2", "electra", "modernbert")


def masked_lm_types() -> set[str]:
    """The model types transformers has a masked-LM class for (imports torch: asked only off the tested list)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return set(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def check_architecture(where: str, config: Mapping[str, Any]) -> None:
    """Raise a one-line :class:`ConfigError` when the model of this ``config.json`` has no usable SPLADE head."""
    model_type = config.get("model_type")
    architecture = (config.get("architectures") or [model_type])[0]
    reason = None
    if model_type not in TESTED and (model_type not in masked_lm_types() or config.get("is_encoder_decoder")):
        reason = "transformers has no encoder-only masked-LM class for it"
    elif model_type == "deberta-v2" and config.get("legacy") is False:
        reason = "its non-legacy head has no vocabulary projection (output embeddings)"
    if reason:
        raise ConfigError(f"{where}: architecture {architecture} (model_type {model_type}) cannot be used: {reason}; "
                          f"supported: any encoder-only AutoModelForMaskedLM (tested: {', '.join(TESTED)})")
