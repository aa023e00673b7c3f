"""One check's outcome, as the preflight page shows it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """What one check saw, in one line; a failing line ends with its fix. ``ok`` is None where the
    check does not apply on this machine (the line says why), so the page can tell "passed" from "not run"."""

    check: str
    ok: bool | None
    line: str

    @property
    def mark(self) -> str:
        return {True: "ok", False: "FAIL", None: "skip"}[self.ok]
