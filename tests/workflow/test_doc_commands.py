"""Every snakemake command README.md and docs/experiments-paper.md give plans its jobs as written (dry runs).

The commands are read from the pages' bash blocks, so a page edited to a command that stops
(Snakemake's "Out of jobs ready to be started" for `--until` over rules that feed each other,
an unknown target) fails here. A `cp` line before a command (the SLURM profile's copy) is done first.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from conftest import REPO
from support.workflow import WITH_BIN, job_counts, snakemake

PAGES = ("README.md", "docs/experiments-paper.md")


def _bash_lines(page: str) -> list[list[str]]:
    """Each line of the page's bash blocks as words, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / page).read_text(), re.S)
    return [words for block in blocks for line in block.splitlines() if (words := shlex.split(line, comments=True))]


def test_the_docs_give_snakemake_commands_and_the_data_step() -> None:
    commands = [words for page in PAGES for words in _bash_lines(page) if words[0] == "snakemake"]
    assert len(commands) >= 8, commands
    assert ["snakemake", "data", "--cores", "8"] in commands
    cores = {words[words.index("--cores") + 1] for words in commands if "--cores" in words}
    assert cores == {"8"}, cores  # one core count throughout: the paper's command, snakemake --cores 8 all


def test_every_snakemake_command_of_the_docs_dry_runs(tmp_path: Path) -> None:
    shutil.copytree(REPO / "workflow", tmp_path / "workflow", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Snakefile", "config", "resources", "envs"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {**WITH_BIN, "CUDA_VISIBLE_DEVICES": ""}  # the commands' plans, whatever GPUs this machine has
    ran = 0
    for page in PAGES:
        for words in _bash_lines(page):
            if words[:2] == ["cp", "-r"]:
                shutil.copytree(tmp_path / words[2], tmp_path / words[3], dirs_exist_ok=True)
            elif words[0] == "snakemake":
                proc = snakemake(*words[1:], "-n", cwd=tmp_path, env=env)
                output = proc.stdout + proc.stderr
                assert proc.returncode == 0 and "Out of jobs" not in output, f"{page}: {shlex.join(words)}\n" \
                                                                              f"{output[-3000:]}"
                counts = job_counts(proc.stdout)
                if words[1] == "data":
                    assert set(counts) == {"prepare_corpus", "corpus_digests", "vectors_overlap", "prepare_queries",
                                           "prepare_training_source", "prepare_training_data", "data", "total"}, counts
                ran += 1
    assert ran >= 8
