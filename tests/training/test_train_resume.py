"""The training curve survives a failed job: the workflow's real `train` rule, killed and rerun.

Snakemake deletes a failed job's declared outputs, train_log.csv among them, but not the
checkpoints folder (a param). The rows up to a checkpoint live inside it, so the rerun's
curve still starts at step 1.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TRIPLES
from support.training import TINY, save_tiny_bert
from support.workflow import ENV, copy_workflow

MODEL = Path("results/models/minilm/baseline")
RECIPE = {**TINY, "source": "tests", "steps": 8, "grad_accumulation": 1, "log_every": 1, "checkpoint_every": 4}


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    """The workflow with the demo config, on the CPU, training a tiny BERT on the MS MARCO triples sample.

    The model's init folder is made here (fetching and rescaling a backbone would double the
    test's time); the rules that may run are all the others.
    """
    copy_workflow(tmp_path)
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config.update(device="cpu", recipes={"tiny": RECIPE})
    config["training"].update(recipe="tiny", data=TRIPLES, threads=1)
    (tmp_path / "config/test.yaml").write_text(yaml.safe_dump(config))
    save_tiny_bert(tmp_path / MODEL / "init")
    return tmp_path


def _snakemake(root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "snakemake", *args, "--cores", "1", "--configfile",
                             "config/test.yaml"], cwd=root, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _rules_but_init(root: Path) -> list[str]:
    """The workflow's rules but those that make a model's init folder."""
    listing = _snakemake(root, "--list-rules").communicate(timeout=600)[0]
    rules = [line.split()[0] for line in listing.splitlines() if line and not line[0].isspace()]
    assert "train" in rules, listing[-3000:]
    return [r for r in rules if r not in ("fetch_backbone", "rescale_head")]


def _trainer(snakemake: subprocess.Popen) -> int:
    """Pid of the job's `splade-rescale train` process (the rule's shell runs it)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # not a process, or one that just ended
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    todo = [snakemake.pid]
    while todo:
        for pid in children.get(todo.pop(), []):
            try:
                argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 2 and argv[1].endswith(b"/splade-rescale") and argv[2] == b"train":
                return pid
            todo.append(pid)
    raise AssertionError("no `splade-rescale train` process under Snakemake")


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_rows_up_to_the_checkpoint_survive_snakemake_deleting_the_failed_jobs_log(workflow: Path) -> None:
    log_csv = workflow / MODEL / "train_log.csv"
    target = [str(MODEL / "manifest.json"), "--allowed-rules", *_rules_but_init(workflow)]
    job = _snakemake(workflow, *target)
    deadline = time.monotonic() + 600
    seen = ""
    while len(_rows(seen)) < 6:  # SIGKILL once step 6 is logged: after the step-4 checkpoint
        assert job.poll() is None and time.monotonic() < deadline, "the job ended before step 6"
        text = log_csv.read_text() if log_csv.exists() else ""
        seen = text[:text.rfind("\n") + 1]  # whole rows only
        time.sleep(0.005)
    os.kill(_trainer(job), signal.SIGKILL)
    output = job.communicate(timeout=120)[0]
    assert job.returncode != 0 and "Removing output files of failed job train" in output, output[-3000:]
    assert not log_csv.exists() and not (workflow / MODEL / "final").exists()
    assert [p.name for p in (workflow / MODEL / "checkpoints").iterdir()] == ["step-0000004.pt"]
    killed = _rows(seen)
    assert 6 <= len(killed) < 8

    rerun = _snakemake(workflow, *target)
    output = rerun.communicate(timeout=600)[0]
    assert rerun.returncode == 0 and "resumed from" in (workflow / MODEL / "train.log").read_text(), output[-3000:]
    resumed = _rows(log_csv.read_text())
    assert [int(r["step"]) for r in resumed] == list(range(1, 9))  # each step once
    assert resumed[:4] == killed[:4]  # the killed run's rows, as it wrote them
    # Steps 5 and 6 are trained again from the checkpoint, to the same losses.
    assert [r["loss"] for r in resumed[4:6]] == [r["loss"] for r in killed[4:6]]
    assert not (workflow / MODEL / "checkpoints").exists()
