"""Every command a user page gives works as written: each `snakemake` command plans its jobs (dry runs),
each `make` target and each `splade-rescale` command exists.

The commands are read from the pages' bash blocks (a line ending in a backslash goes on in the next), so
a page edited to a command that stops (Snakemake's "Out of jobs ready to be started" for `--until` over
rules that feed each other, an unknown target, a make target the Makefile lacks) fails here. A `cp`
line before a command (the SLURM profile's copy) is done first. docs/datasets.md's commands, which
need the config its page builds, run in tests/test_readme_dataset.py.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from conftest import REPO
from support.workflow import WITH_BIN, job_counts, snakemake

PAPER_COMMAND_PAGES = ("README.md", "docs/experiments-paper.md")  # the paper's command: snakemake --cores 8
BUILT_ELSEWHERE = ("docs/datasets.md", "docs/contributing.md", "docs/testing.md", "docs/measurements.md")
USER_PAGES = tuple(p for p in ("README.md", *(f"docs/{f.name}" for f in sorted((REPO / "docs").glob("*.md"))),
                               "config/README.md") if p not in BUILT_ELSEWHERE)


def _bash_lines(page: str) -> list[list[str]]:
    """Each command of the page's bash blocks as words (continuation lines joined), comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / page).read_text(), re.S)
    return [words for block in blocks for line in re.sub(r"\\\n", " ", block).splitlines()
            if (words := shlex.split(line, comments=True))]


def _commands(pages: tuple[str, ...], program: str) -> list[tuple[str, list[str]]]:
    return [(page, words) for page in pages for words in _bash_lines(page) if words[0] == program]


def test_the_docs_give_snakemake_commands_and_the_data_step() -> None:
    commands = [words for _, words in _commands(PAPER_COMMAND_PAGES, "snakemake")]
    assert len(commands) >= 8, commands
    assert ["snakemake", "data", "--cores", "8"] in commands
    cores = {words[words.index("--cores") + 1] for words in commands if "--cores" in words}
    assert cores == {"8"}, cores  # one core count throughout: the paper's command, snakemake --cores 8 all


def test_bash_lines_join_continued_lines() -> None:
    assert shlex.split(re.sub(r"\\\n", " ", "docker run --gpus all \\\n  -v a:b img \\\n  cmd")) == \
        ["docker", "run", "--gpus", "all", "-v", "a:b", "img", "cmd"]


def test_every_make_target_and_command_of_the_user_pages_exists() -> None:
    """`make TARGET` of any user page is a target of the Makefile; `splade-rescale CMD` a command."""
    from splade_rescale.cli import COMMANDS

    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"(?m)^([a-z][\w-]*):(?!=)", makefile))
    made = _commands(USER_PAGES, "make")
    assert len(made) >= 8, made
    missing = [f"{page}: {shlex.join(words)}" for page, words in made
               if next((w for w in words[1:] if "=" not in w and not w.startswith("-")), "install")
               not in targets]
    assert not missing, f"make targets the Makefile lacks: {missing}"
    tools = _commands(USER_PAGES, "splade-rescale") + _commands(USER_PAGES, ".venv/bin/splade-rescale")
    unknown = [f"{page}: {shlex.join(words)}" for page, words in tools if words[1] not in COMMANDS]
    assert tools and not unknown, f"splade-rescale commands that do not exist: {unknown}"


def _without_cores(words: list[str]) -> tuple[str, ...]:
    i = words.index("--cores") if "--cores" in words else len(words)
    return tuple(words[:i] + words[i + 2:])


def test_every_snakemake_command_of_the_docs_dry_runs(tmp_path: Path) -> None:
    shutil.copytree(REPO / "workflow", tmp_path / "workflow", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Snakefile", "config", "resources", "envs"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {**WITH_BIN, "CUDA_VISIBLE_DEVICES": ""}  # the commands' plans, whatever GPUs this machine has
    ran, seen = 0, set()
    for page in USER_PAGES:
        for words in _bash_lines(page):
            if words[:2] == ["cp", "-r"]:
                shutil.copytree(tmp_path / words[2], tmp_path / words[3], dirs_exist_ok=True)
            elif words[0] == "snakemake" and (key := _without_cores(words)) not in seen:  # once each, at any cores
                seen.add(key)
                proc = snakemake(*words[1:], "-n", cwd=tmp_path, env=env)
                output = proc.stdout + proc.stderr
                assert proc.returncode == 0 and "Out of jobs" not in output, f"{page}: {shlex.join(words)}\n" \
                                                                              f"{output[-3000:]}"
                counts = job_counts(proc.stdout)
                if words[1] == "data":
                    assert set(counts) == {"prepare_corpus", "corpus_digests", "vectors_overlap", "prepare_queries",
                                           "prepare_training_source", "prepare_training_data", "data", "total"}, counts
                ran += 1
    assert ran >= 10, ran
