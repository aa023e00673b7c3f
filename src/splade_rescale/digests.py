"""Content digests of files and folders: what resumable state is keyed by; and of a corpus's documents.

Contents, not modification times: a copy of a results tree (``cp -r``) keeps its checkpoints
usable, and a file rewritten with other bytes never passes for the old one. SHA-256 reads a few
GB per second, so even a 1B-parameter init costs seconds once per job.

A document is the same in two corpora when its id and its text are: rule corpus_digests writes a 16-byte
BLAKE2b digest of each, in corpus order, by which a corpus finds those its declared source of vectors holds
(:mod:`splade_rescale.encoding.reuse`; written by :func:`splade_rescale.data.prepare.write_corpus_digests`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

_BLOCK = 1 << 22
DOC_DIGEST_BYTES = 16
DOC_DIGEST = f"V{DOC_DIGEST_BYTES}"  # numpy dtype of a digest array: raw bytes (not "S": it strips trailing NULs)


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


def doc_digest(docid: str, text: str) -> bytes:
    return hashlib.blake2b(f"{docid}\0{text}".encode(), digest_size=DOC_DIGEST_BYTES).digest()


def read_digests(path: str | Path) -> np.ndarray:
    return np.fromfile(path, dtype=DOC_DIGEST)
