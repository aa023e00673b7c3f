"""Code style: ruff (configured in pyproject.toml) passes on the package, tests and benchmarks, so that a
style regression fails `make test` and CI; the rules' lint is tests/workflow/test_workflow.py::test_lint_is_clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_ruff_is_clean() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run([str(ruff), "check", "src", "tests", "benchmarks"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
