"""A model's size without its weights: from its ``config.json`` (Hub cache or Hub, a local folder,
a package, or a ``source: config`` entry's sizes), or from the ``shape`` its config entry gives."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path
from typing import Any, Mapping

from splade_rescale.backbones.families import check_architecture
from splade_rescale.config import ConfigError


@dataclasses.dataclass(frozen=True)
class ModelShape:
    model_type: str  # modernbert: the plan uses the ModernBERT figures; any other type the BERT ones
    parameters: int
    layers: int
    hidden: int


def _config_file(spec: Mapping[str, Any], root: Path, offline: bool) -> Path | None:
    """The model's config.json on this machine (``offline``: never download; None when absent)."""
    if spec["source"] == "package":
        return Path(importlib.import_module(spec["package"]).get_model_path()) / "config.json"
    if spec["source"] in ("local", "sentence_transformers"):
        return root / Path(spec["path"]).expanduser() / "config.json"
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(spec["repo_id"], "config.json", revision=spec.get("revision", "main"))
    if isinstance(cached, str) or offline:
        return Path(cached) if isinstance(cached, str) else None
    try:
        return Path(hf_hub_download(spec["repo_id"], "config.json", revision=spec.get("revision", "main")))
    except Exception:  # offline or unreachable: the caller says what to write instead  # noqa: BLE001
        return None


def model_shape(name: str, spec: Mapping[str, Any], root: Path = Path("."), offline: bool = False,
                where: str = "backbones") -> ModelShape:
    """Shape of a backbone or published model: its entry's ``shape``, else its transformers config
    (parameters counted on the meta device, so no weights are read or allocated)."""
    if spec.get("shape"):
        return ModelShape(**spec["shape"])
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM

    if spec["source"] == "config":
        from splade_rescale.backbones.from_config import model_config

        config = model_config(name, spec)
    else:
        path = _config_file(spec, root, offline)
        if path is None or not path.is_file():
            raise ConfigError(
                f"{where}.{name}: no config.json for {spec.get('repo_id') or spec.get('path')} on this machine; fix: "
                f"run once with the Hugging Face Hub reachable, or add shape: {{model_type, parameters, layers, "
                f"hidden}} (from its config.json and model card) to {where}.{name} in the experiment config")
        config = AutoConfig.from_pretrained(str(path.parent))
        check_architecture(f"{where}.{name} ({spec.get('repo_id') or spec.get('path')})", config.to_dict())
    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(config)
    return ModelShape(config.model_type, sum(p.numel() for p in model.parameters()),
                      config.num_hidden_layers, config.hidden_size)


def check_architectures(config: Mapping[str, Any], root: Path = Path(".")) -> None:
    """Refuse, before any job, a backbone or published model whose config.json on this machine names an
    architecture without a usable masked-LM head (one not on this machine yet is checked by ``make plan``)."""
    for where in ("backbones", "published_models"):
        for name, spec in (config.get(where) or {}).items():
            if spec["source"] != "config" and (path := _config_file(spec, root, offline=True)) and path.is_file():
                source = spec.get("repo_id") or spec.get("path") or spec.get("package")
                check_architecture(f"{where}.{name} ({source})", json.loads(path.read_text()))


def estimated_parameters(spec: Mapping[str, Any]) -> float:
    """A model's parameters: its entry's ``shape``, else estimated from the config.json on this machine
    (12 x layers x hidden^2 + vocab x hidden: no torch at parse time); inf where unknown."""
    if spec.get("shape"):
        return spec["shape"]["parameters"]
    try:
        if spec["source"] == "config":
            s = spec["sizes"]
            layers, hidden, vocab = s["layers"], s["hidden"], s["vocab_size"]
        else:
            c = json.loads(_config_file(spec, Path("."), offline=True).read_text())  # type: ignore[union-attr]
            layers, hidden, vocab = c["num_hidden_layers"], c["hidden_size"], c["vocab_size"]
    except (AttributeError, OSError, KeyError, ImportError, ValueError):
        return float("inf")
    return 12 * layers * hidden ** 2 + vocab * hidden


def gpu_job_priorities(models: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Snakemake ``priority`` of each model's encode jobs: the smaller the model, the higher.

    Why: the paper's indexes and searches take about six core-hours per GPU-hour, and a small
    model's encodes release that index work soonest; a large model first leaves the cores short of
    work while it encodes and the GPU idle at the end behind the last indexes (``plan``). Every
    priority is at least 1, above the CPU jobs' 0, so that a GPU job is never kept behind a Lucene
    job waiting for the same cores. The size is the entry's ``shape``, else estimated from the
    config.json on this machine (12 x layers x hidden^2 + vocab x hidden: no torch at parse time);
    a model of unknown size ranks as the largest."""
    sizes = {name: estimated_parameters(spec) for name, spec in models.items()}
    return {name: 1 + sum(other > sizes[name] for other in sizes.values()) for name in models}


def train_job_priorities(models: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Snakemake ``priority`` of each model's training: the larger the model, the higher, every one above
    the encodes' (:func:`gpu_job_priorities`).

    Why: a training heads its model's chain of encodes, and the largest model's chain is the longest.
    Started last, as the encodes' order would have it, that chain runs on alone at the end of a
    multi-GPU run while the other GPUs wait (``plan`` at 64 cores: 8 GPUs 11.7 -> 11.4 h, 4 GPUs
    22.3 -> 22.1 h); on one GPU the total is the same work, and the plan is no slower."""
    encode = gpu_job_priorities(models)
    top = max(encode.values(), default=0)
    return {name: 2 * top + 1 - p for name, p in encode.items()}
