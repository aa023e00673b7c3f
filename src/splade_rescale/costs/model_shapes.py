"""A model's size without its weights (architecture, parameters, layers, hidden, vocabulary) and
the token work of one training query, which the plan scales the measured GPU figures by."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from splade_rescale.costs.inputs import PlanError
from splade_rescale.costs.sizes import Histogram, expected_longest


@dataclasses.dataclass(frozen=True)
class ModelShape:
    architecture: str  # bert | modernbert: which measured GPU figures apply
    parameters: int
    layers: int
    hidden: int
    vocab: int


# Hub models of the paper config (parameter counts from the model cards; ModernBERT and BERT counted
# here with transformers on the meta device; Ettin shapes from its model cards: approximate).
KNOWN_MODELS: dict[str, ModelShape] = {
    "google-bert/bert-base-uncased": ModelShape("bert", 109_514_298, 12, 768, 30_522),
    "bert-base-uncased": ModelShape("bert", 109_514_298, 12, 768, 30_522),
    "naver/splade-cocondenser-ensembledistil": ModelShape("bert", 109_514_298, 12, 768, 30_522),
    "answerdotai/ModernBERT-base": ModelShape("modernbert", 149_655_232, 22, 768, 50_368),
    "answerdotai/ModernBERT-large": ModelShape("modernbert", 395_881_664, 28, 1024, 50_368),
    "jhu-clsp/ettin-encoder-17m": ModelShape("modernbert", 17_000_000, 7, 256, 50_368),
    "jhu-clsp/ettin-encoder-32m": ModelShape("modernbert", 32_000_000, 10, 384, 50_368),
    "jhu-clsp/ettin-encoder-68m": ModelShape("modernbert", 68_000_000, 19, 512, 50_368),
    "jhu-clsp/ettin-encoder-150m": ModelShape("modernbert", 150_000_000, 22, 768, 50_368),
    "jhu-clsp/ettin-encoder-400m": ModelShape("modernbert", 400_000_000, 28, 1024, 50_368),
    "jhu-clsp/ettin-encoder-1b": ModelShape("modernbert", 1_000_000_000, 28, 1792, 50_368),
}


def gpu_job_priorities(models: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Snakemake ``priority`` of each model's train and encode jobs: the smaller the model, the higher.

    Why: the paper's indexes and searches take about six core-hours per GPU-hour, and a small
    model's encodes release that index work soonest; a large model first leaves the cores short of
    work while it encodes and the GPU idle at the end behind the last indexes (``plan --cores``).
    Every priority is at least 1, above the CPU jobs' 0, so that a GPU job is never kept behind a
    Lucene job waiting for the same cores. A model of unknown size (not in KNOWN_MODELS) ranks as
    the largest."""
    size = {name: KNOWN_MODELS[spec["repo_id"]].parameters if spec.get("repo_id") in KNOWN_MODELS else float("inf")
            for name, spec in models.items()}
    return {name: 1 + sum(other > size[name] for other in size.values()) for name in models}


def shape_of_config(config: Any) -> ModelShape:
    import torch
    from transformers import AutoModelForMaskedLM

    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(config)
    arch = "modernbert" if config.model_type == "modernbert" else "bert"
    return ModelShape(arch, sum(p.numel() for p in model.parameters()), config.num_hidden_layers,
                      config.hidden_size, config.vocab_size)


def model_shape(name: str, spec: Mapping[str, Any], throughputs: Mapping[str, Any], root: Path) -> ModelShape:
    """Architecture and size of a backbone or published model, without downloading weights."""
    own = (throughputs.get("models") or {}).get(name) or (throughputs.get("models") or {}).get(spec.get("repo_id"))
    if own:
        return ModelShape(**own)
    source = spec["source"]
    if source == "hf":
        if spec["repo_id"] not in KNOWN_MODELS:
            raise PlanError(f"{name}: {spec['repo_id']} is not in splade_rescale.costs.model_shapes.KNOWN_MODELS; "
                            "fix: add "
                            f'"models": {{"{name}": {{"architecture", "parameters", "layers", "hidden", "vocab"}}}} '
                            "to the throughputs file")
        return KNOWN_MODELS[spec["repo_id"]]
    if source == "config":
        from splade_rescale.backbones.from_config import model_config

        return shape_of_config(model_config(name, spec))
    from transformers import AutoConfig

    if source == "package":
        import importlib

        folder = Path(importlib.import_module(spec["package"]).get_model_path())
    else:
        folder = root / spec["path"]
    return shape_of_config(AutoConfig.from_pretrained(str(folder)))


def token_cost(tokens_per_text: float, texts: float, attention: float) -> float:
    """Forward work of ``texts`` texts padded to ``tokens_per_text``: linear in tokens, plus the
    attention scores' quadratic term (``attention`` = 2 x layers x hidden / parameters per token)."""
    return texts * tokens_per_text * (1 + attention * tokens_per_text)


def train_work_per_query(shape: ModelShape, recipe: Mapping[str, Any], queries: Histogram, docs: Histogram,
                         processes: int = 1, attention: bool = True) -> float:
    """Token work of one training query: each micro-batch's queries padded to their longest, its
    positives and negatives padded together to theirs (``SpladeEncoder.tokenize`` pads to the longest)."""
    per_rank = max(1, -(-recipe["batch_size"] // (recipe["grad_accumulation"] * processes)))
    n_docs = 1 + recipe["negatives_per_query"]
    a = 2 * shape.layers * shape.hidden / shape.parameters if attention else 0.0
    q = expected_longest(queries, per_rank, recipe["query_max_length"])
    d = expected_longest(docs, per_rank * n_docs, recipe["doc_max_length"])
    return token_cost(q, 1, a) + token_cost(d, n_docs, a)
