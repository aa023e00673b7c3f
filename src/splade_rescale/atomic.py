"""Atomic outputs: every stage writes to a temporary path in the destination's folder and
renames it into place at the end, so an interrupted job never leaves a half-written file or
folder that a later run (or Snakemake) would mistake for a finished one.

``fsync=True`` also makes the file durable before it appears (file, then folder, synced): for
resume state, which a later run trusts after a node crash, not only after a killed process."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator


def _tmp_sibling(final: Path, suffix: str = "") -> Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=f".tmp{suffix}", dir=final.parent)
    os.close(fd)
    os.chmod(name, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs get the usual permissions
    return Path(name)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


@contextlib.contextmanager
def atomic_file(path: str | Path, fsync: bool = False) -> Iterator[Path]:
    """Yield a temporary file path beside ``path``; on success it replaces ``path`` atomically."""
    final = Path(path)
    remove_stale_tmp(final.parent, final.name)
    tmp = _tmp_sibling(final)
    try:
        yield tmp
        if fsync:
            fsync_path(tmp)
        os.replace(tmp, final)
        if fsync:
            fsync_path(final.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fsync_path(path: str | Path) -> None:
    """Flush a file's data, or a folder's entries (a rename in it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it takes ``path``'s place.

    A previous ``path`` (complete or partial) is moved aside first and deleted after the
    rename, so ``path`` is never a mix of old and new content.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(final.parent, final.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)
    try:
        yield tmp
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace_dir(src: Path, final: Path) -> None:
    """Rename folder ``src`` to ``final``; a previous ``final`` is moved aside first, then deleted."""
    old = None
    if final.exists() or final.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
        os.replace(final, old / "x")
    os.replace(src, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_text(path: str | Path, text: str, *, fsync: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_file(path, fsync) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | Path, obj: Any, indent: int | None = 2, *, fsync: bool = False) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (keys kept in insertion order)."""
    write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n", fsync=fsync)


def remove_stale_tmp(folder: str | Path, name: str) -> None:
    """Delete temporaries left by an interrupted write of ``folder/name`` (restart clean).

    Safe because one output has one writer at a time (Snakemake's guarantee)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    stem = f".{glob.escape(name)}.{'?' * 8}"  # tempfile's 8 random characters: no other name matches
    for p in folder.glob(f"{stem}.tmp"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    for p in folder.glob(f"{stem}.old"):
        shutil.rmtree(p, ignore_errors=True)
