"""Content digests of files and folders: what resumable state is keyed by.

Contents, not modification times: a copy of a results tree (``cp -r``) keeps its checkpoints
usable, and a file rewritten with other bytes never passes for the old one. SHA-256 reads a few
GB per second, so even a 1B-parameter init costs seconds once per job.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_BLOCK = 1 << 22


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def folder_sha256(folder: str | Path) -> str:
    """One digest of every file below ``folder``: relative names and contents."""
    folder = Path(folder)
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(folder).as_posix()}\0{file_sha256(path)}\n".encode())
    return h.hexdigest()
