"""Resuming a killed training run: the workflow's real `train` rule, and the trainer after a change.

Snakemake deletes a failed job's declared outputs, train_log.csv among them, but not the
checkpoints folder (a param). The rows up to a checkpoint live inside it, so the rerun's
curve still starts at step 1. A checkpoint carries the fingerprint of its run: after a change of
init, recipe or examples the rerun starts over instead of continuing another run's weights.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForMaskedLM

from conftest import REPO, TRIPLES
from splade_rescale.training.train import run_training
from support.processes import freeze_when
from support.training import TINY, save_tiny_bert, tiny_recipe, training_paths
from support.workflow import ENV, copy_workflow

MODEL = Path("results/demo/models/minilm/baseline")
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


def _trainer(snakemake: subprocess.Popen) -> int | None:
    """Pid of the job's `splade-rescale train` process (the rule's shell runs it), or None before it starts."""
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
    return None


def _wait_for_trainer(job: subprocess.Popen, deadline: float) -> int:
    """The trainer's pid, seen while it loads (seconds before its first step)."""
    while (pid := _trainer(job)) is None:
        assert job.poll() is None and time.monotonic() < deadline, \
            "the job ended, or 600 s passed, before its `splade-rescale train` process was seen"
        time.sleep(0.01)
    return pid


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_rows_up_to_the_checkpoint_survive_snakemake_deleting_the_failed_jobs_log(workflow: Path) -> None:
    log_csv = workflow / MODEL / "train_log.csv"
    target = [str(MODEL / "manifest.json"), "--allowed-rules", *_rules_but_init(workflow)]
    job = _snakemake(workflow, *target)
    trainer = _wait_for_trainer(job, time.monotonic() + 600)
    seen = ""

    def step_6_logged() -> bool:  # read while the trainer is frozen
        nonlocal seen
        text = log_csv.read_text() if log_csv.exists() else ""
        seen = text[:text.rfind("\n") + 1]  # whole rows only
        return len(_rows(seen)) >= 6

    # SIGKILL once step 6 is logged: after the step-4 checkpoint. Frozen there, the trainer cannot
    # reach its end (step 8, the final model, deleting its checkpoints) before the kill.
    freeze_when([trainer], step_6_logged, "step 6 of 8 was logged")
    assert not (workflow / MODEL / "final").exists(), "the trainer had finished when frozen"
    os.kill(trainer, signal.SIGKILL)
    output = job.communicate(timeout=120)[0]
    assert job.returncode != 0 and "Removing output files of failed job train" in output, output[-3000:]
    assert not log_csv.exists() and not (workflow / MODEL / "final").exists()
    assert [p.name for p in (workflow / MODEL / "checkpoints").iterdir()] == ["step-0000004.pt"]
    killed = _rows(seen)
    assert 6 <= len(killed) <= 8  # frozen after step 6 and before the final model: at most 8 rows

    rerun = _snakemake(workflow, *target)
    output = rerun.communicate(timeout=600)[0]
    assert rerun.returncode == 0 and "resumed from" in (workflow / MODEL / "train.log").read_text(), output[-3000:]
    resumed = _rows(log_csv.read_text())
    assert [int(r["step"]) for r in resumed] == list(range(1, 9))  # each step once
    assert resumed[:4] == killed[:4]  # the killed run's rows, as it wrote them
    # Steps 5 and 6 are trained again from the checkpoint, to the same losses.
    assert [r["loss"] for r in resumed[4:6]] == [r["loss"] for r in killed[4:6]]
    assert not (workflow / MODEL / "checkpoints").exists()


# ---------------------------------------------------------------------------- a checkpoint of another run

def _weights(final: Path) -> dict:
    return AutoModelForMaskedLM.from_pretrained(final).state_dict()


def _killed_after_a_checkpoint(init: Path, out: Path, recipe: dict, data: dict = TRIPLES) -> None:
    """A trainer run (its own process) killed once it has written a checkpoint, as a node crash leaves it."""
    p = training_paths(out)
    job = subprocess.Popen([sys.executable, "-m", "splade_rescale.training.train", "--init-dir", str(init),
                            "--final-dir", str(p["final_dir"]), "--log-csv", str(p["log_csv"]),
                            "--record", str(p["record_path"]), "--checkpoint-dir", str(p["checkpoint_dir"]),
                            "--recipe-json", json.dumps(recipe), "--data-json", json.dumps(data),
                            "--device", "cpu"], env={**ENV, "OMP_NUM_THREADS": "1"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # frozen with a checkpoint on disk (written atomically: present means whole), then killed as a crash would
    freeze_when([job.pid], lambda: bool(list(p["checkpoint_dir"].glob("step-*.pt"))), "its first checkpoint",
                timeout=300)
    job.kill()
    job.wait(timeout=60)
    assert list(p["checkpoint_dir"].glob("step-*.pt")) and not p["record_path"].exists()


@pytest.mark.parametrize("change", ["init", "lr", "examples", "streamed"])
def test_a_checkpoint_of_another_run_is_not_resumed(tmp_path: Path, change: str) -> None:
    """Killed, then rerun after a change of its init (another factor, say), its recipe or its training
    examples (a prepared file, or a local examples file the run streams itself, edited in place): the
    rerun starts over, logging what differs, and ends with the weights of an uninterrupted run of the new
    settings. A change of cadence alone resumes."""
    first = save_tiny_bert(tmp_path / "init-a")
    recipe = tiny_recipe(steps=12, checkpoint_every=2, keep_checkpoints=1)
    examples = tmp_path / "examples.jsonl"
    data = {**TRIPLES, "prepared": str(examples)} if change == "examples" else \
        {"source": "examples_jsonl", "path": str(examples)} if change == "streamed" else TRIPLES
    second, new_recipe, new_data = first, recipe, data
    if change == "init":
        second = save_tiny_bert(tmp_path / "init-b", decoder_bias=-0.3)
    elif change == "lr":
        new_recipe = {**recipe, "lr": 2.0e-3}
    if change in ("examples", "streamed"):  # the run's examples, written again with one text changed below
        from splade_rescale.training.data import prepare_examples

        prepare_examples(TRIPLES, {"seed": 0, "shuffle_buffer": 16, "teacher_scores": None, "examples": 48},
                         examples)
    out = tmp_path / "out"
    _killed_after_a_checkpoint(first, out, {**recipe, "log_every": 3}, data if change == "streamed" else TRIPLES)
    if change in ("examples", "streamed"):
        lines = (tmp_path / "examples.jsonl").read_text().splitlines(keepends=True)
        lines[0] = lines[0].replace('"query": "', '"query": "edited ', 1)
        (tmp_path / "examples.jsonl").write_text("".join(lines))
    run_training(second, recipe=new_recipe, data_spec=new_data, device="cpu", **training_paths(out))
    log = (out / "train.log").read_text()
    differs = re.search(r"checkpoint of another run \(([^)]*) differ\); starting over", log)
    assert "resumed from" not in log and differs, log[-2000:]
    assert differs.group(1) == {"init": "init", "lr": "recipe", "examples": "examples", "streamed": "examples"}[change]
    run_training(second, recipe=new_recipe, data_spec=new_data, device="cpu", **training_paths(tmp_path / "fresh"))
    got, want = _weights(out / "final"), _weights(tmp_path / "fresh" / "final")
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_change_of_cadence_alone_resumes(tmp_path: Path) -> None:
    init = save_tiny_bert(tmp_path / "init")
    recipe = tiny_recipe(steps=12, checkpoint_every=2, keep_checkpoints=1)
    _killed_after_a_checkpoint(init, tmp_path / "out", recipe)
    run_training(init, recipe={**recipe, "log_every": 4, "checkpoint_every": 3}, data_spec=TRIPLES, device="cpu",
                 **training_paths(tmp_path / "out"))
    assert "resumed from" in (tmp_path / "out" / "train.log").read_text()
