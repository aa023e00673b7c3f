"""The vector key: what a document's vector depends on, and so what a resumed encode must match.

The model's content, the corpus (its spec and, for local files, their contents), the head, the output
settings (max length, quantisation, top-k, compressor) and the encoder's numerics (precision, device
type, compiled or not). Not the batching, the shard size, the threads, the parts or the GPU count: a
document's vector depends on the document alone (:mod:`splade_rescale.encoding.buckets`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

from splade_rescale.model.splade import SpladeEncoder, uses_bf16


def bf16_autocast(enc: object) -> bool | None:
    """Whether the encoder computes under bf16 autocast (``precision: auto`` depends on the device)."""
    return uses_bf16(enc.device, enc.precision) if isinstance(enc, SpladeEncoder) else None


def model_fingerprint(model_dir: str | Path) -> str:
    """SHA-256 over a model folder's file names and contents: a retrained model differs, a copy does not.

    Contents, not modification times: a retrain within the same second, or a tool that keeps
    times, cannot pass for the old model, and a copy to another node's scratch still resumes.
    Reading the weights once costs about what loading them does.
    """
    h = hashlib.sha256()
    folder = Path(model_dir)
    for p in sorted(folder.rglob("*")) if folder.is_dir() else ():
        if p.is_file():
            h.update(f"{p.relative_to(folder)}\0{p.stat().st_size}\0".encode())
            with open(p, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
    return h.hexdigest()


def resume_inputs(model_dir: str | Path, name: str, corpus_spec: Mapping, head: str,
                  files_sha256: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The upstream part of a corpus encode's resume key: model content, corpus (its spec and, for local
    files, their contents) and head (``encode_docs`` adds the document count, output settings, precision,
    device and batching)."""
    return {"model": model_fingerprint(model_dir), "corpus": name, "spec": dict(corpus_spec),
            "files": dict(files_sha256 or {}), "head": head}


def encoder_numerics(encoder: Any) -> dict[str, Any]:
    """What the encoder's numbers depend on besides the model: effective precision, device type and
    whether the backbone is compiled (a compiled backbone rounds differently). Not the batching, the
    threads or the GPU's model: a document's vector depends on the document alone
    (:mod:`splade_rescale.encoding.buckets`). None for an encoder that is not the project's (a test's stub).
    """
    bf16 = bf16_autocast(encoder)
    if bf16 is None:
        return {"precision": None, "device": None, "compiled": None}
    return {"precision": "bf16" if bf16 else "fp32", "device": encoder.device.type, "compiled": encoder.compiled}
