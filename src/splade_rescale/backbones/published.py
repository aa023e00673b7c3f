"""Published SPLADE checkpoints as calibration rows: fetched, then encoded, indexed, retrieved
and evaluated by the same rules as our trained models, and shown next to their published
figures (``tables.calibration_table``).

Why: a difference between our number and Pyserini's for the same checkpoint on a full
collection means our encode -> quantise -> impact index -> search chain differs from
Pyserini's, which would make every other row of our tables suspect.

Sources (``published_models.{name}.source``): ``hf`` (``repo_id`` + ``revision``), ``local``
(a masked-LM checkpoint folder) and ``sentence_transformers`` (a SparseEncoder folder: its
masked-LM module's folder is used: MLMTransformer, or Transformer with the fill-mask task).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from splade_rescale.atomic import atomic_dir, write_json

log = logging.getLogger(__name__)


def _mlm_module_dir(folder: Path, name: str) -> Path:
    """The masked-LM module's folder of a sentence-transformers SparseEncoder folder (its first
    module: ``MLMTransformer`` in older releases, ``Transformer`` with ``fill-mask`` since 6)."""
    modules = folder / "modules.json"
    if not modules.is_file():
        raise FileNotFoundError(f"published_models.{name}.path = {folder}: no modules.json; "
                                "a SparseEncoder folder is expected (else use source: local)")
    for module in json.loads(modules.read_text()):
        if module.get("type", "").rsplit(".", 1)[-1] in ("MLMTransformer", "Transformer"):
            return folder / module.get("path", "")
    raise ValueError(f"published_models.{name}.path = {folder}: modules.json has no (MLM)Transformer module; "
                     "only SPLADE-style SparseEncoders (masked-LM transformer + SpladePooling) can be used")


def fetch_published_model(name: str, spec: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Write ``out_dir/final`` (model + tokenizer, fp32) and ``out_dir/manifest.json`` (status ok)."""
    from transformers import AutoTokenizer

    from splade_rescale.backbones.sources import resolve_source
    from splade_rescale.model.heads import load_masked_lm, mlm_head

    out_dir = Path(out_dir)
    if spec["source"] == "sentence_transformers":
        local = {"source": "local", "path": str(_mlm_module_dir(Path(spec["path"]).expanduser(), name))}
        folder, provenance = resolve_source(name, local)
    else:
        folder, provenance = resolve_source(name, spec)
    model, missing = load_masked_lm(folder)  # fp32 weights, whatever the checkpoint's dtype
    head = mlm_head(model)
    if missing:
        raise ValueError(f"published model {name!r}: the checkpoint at {folder} lacks {', '.join(missing[:5])}; "
                         "a published model must be a trained SPLADE model with its whole MLM head")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    with atomic_dir(out_dir / "final") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    manifest = {"status": "ok", "published_model": name, "source": spec["source"], **provenance,
                "architecture": head.architecture, "dtype": "float32",
                "parameters": sum(p.numel() for p in model.parameters()),
                "notes": ["published checkpoint: no norms, rescaling or training"]}
    write_json(out_dir / "manifest.json", manifest)
    log.info("published model %s: %s from %s", name, head.architecture, folder)
    return manifest
