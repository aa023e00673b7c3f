"""Why a model's later stages do not compute: a collapsed training run, or a corpus too dense to index.

A collapsed run is a result, not a crash. Its encoding, indexing and retrieval each leave a
``SKIPPED.json`` record (status, reason, collapse step) where their outputs would be, and every
stage after them passes the record on, so the tables show ``collapsed`` (or ``too dense``) with
the reason and the workflow goes on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SKIPPED = "SKIPPED.json"


def collapsed(manifest_path: Path | None) -> dict[str, Any] | None:
    """The training manifest if that run collapsed: later stages record it instead of computing."""
    if manifest_path is None:
        return None
    manifest = json.loads(manifest_path.read_text())
    if manifest["status"] == "ok":
        return None
    return {"status": manifest["status"], "reason": manifest.get("reason"),
            "collapse_step": manifest.get("collapse_step")}


def skipped(folder: Path | None) -> dict[str, Any] | None:
    """The SKIPPED record an upstream stage left in ``folder`` (collapsed or too dense), if any."""
    marker = folder / SKIPPED if folder else None
    return json.loads(marker.read_text()) if marker and marker.is_file() else None
