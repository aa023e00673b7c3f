"""Training in 2 processes (gloo on CPU, launched as torchrun would: RANK, WORLD_SIZE, LOCAL_RANK).

What one process with the same global batch does, two must do: each rank encodes its slice
of every micro-batch, only rank 0 writes, the weights end up the same, and a run killed
after a checkpoint resumes to the weights of an uninterrupted one (each rank's RNG restored).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForMaskedLM

from conftest import TRIPLES
from splade_rescale.training.train import run_training
from support.processes import freeze_when
from support.training import save_tiny_bert, tiny_recipe, training_paths

# 4 queries a step: 2 per rank in 2 processes.
RECIPE = {"batch_size": 4, "grad_accumulation": 1, "steps": 6, "checkpoint_every": 2, "keep_checkpoints": 1}


# The trainer's CLI, with a handler on its logger that reports the rank's private memory
# (RssAnon, kB) in-line, as the rank logs 'rank r/2: queries ...': the line after the model is
# loaded and the checkpoint, if any, restored, before the first step allocates gradients and
# AdamW moments. Measured by the rank itself at that point, not sampled from outside.
_TRAIN_REPORTING_MEMORY = """
import logging, runpy, sys

class _Report(logging.Handler):
    def emit(self, record):
        if isinstance(record.msg, str) and record.msg.startswith("rank %d/%d: queries"):
            with open("/proc/self/status") as f:
                kb = next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
            print(f"private kB before the first step: {kb}", file=sys.stderr, flush=True)

logging.getLogger("splade_rescale.training.train").addHandler(_Report())
runpy.run_module("splade_rescale.training.train", run_name="__main__", alter_sys=True)
"""


def _cli(init: Path, out: Path, recipe: dict[str, Any], code: str = _TRAIN_REPORTING_MEMORY) -> list[str]:
    p = training_paths(out)
    return [sys.executable, "-c", code, "--init-dir", str(init),
            "--final-dir", str(p["final_dir"]),
            "--log-csv", str(p["log_csv"]), "--record", str(p["record_path"]),
            "--checkpoint-dir", str(p["checkpoint_dir"]), "--recipe-json", json.dumps(recipe),
            "--data-json", json.dumps(TRIPLES), "--device", "cpu"]


def _launch(init: Path, out: Path, recipe: dict, code: str = _TRAIN_REPORTING_MEMORY) -> list[subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    return [subprocess.Popen(_cli(init, out, recipe, code), env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for r in range(2)]


def _finish(procs: list[subprocess.Popen]) -> tuple[list[str], list[int]]:
    """Wait for both ranks; return their stderr (logging goes there) and each one's private memory
    (kB) before its first step, as it reported it."""
    with ThreadPoolExecutor(len(procs)) as pool:  # both pipes read at once: neither rank blocks on a full one
        outs = list(pool.map(lambda p: p.communicate(timeout=600)[1], procs))
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    kb = [re.findall(r"private kB before the first step: (\d+)\n", err) for err in outs]
    assert all(len(k) == 1 for k in kb), outs[0][-2000:] + outs[1][-2000:]
    return outs, [int(k[0]) for k in kb]


def _weights(final: Path) -> dict[str, torch.Tensor]:
    return AutoModelForMaskedLM.from_pretrained(final).state_dict()


def _log_rows(out: Path) -> list[dict[str, str]]:
    with open(out / "train_log.csv") as f:
        return list(csv.DictReader(f))


def test_two_processes_match_one_with_the_same_global_batch(tmp_path: Path) -> None:
    init = save_tiny_bert(tmp_path / "init", dropout=0.0)  # dropout would draw differently per process count
    recipe = tiny_recipe(**RECIPE)
    one = run_training(init, recipe=recipe, data_spec=TRIPLES, device="cpu", **training_paths(tmp_path / "one"))
    errs, _ = _finish(_launch(init, tmp_path / "two", recipe))
    assert "rank 0/2: queries [0, 2) of each micro-batch of 4" in errs[0]
    assert "rank 1/2: queries [2, 4) of each micro-batch of 4" in errs[1]
    # Only rank 0 writes: one log row per step, one "finished" line, no checkpoints left.
    rows = _log_rows(tmp_path / "two")
    assert [int(r["step"]) for r in rows] == list(range(1, 7))
    assert "finished:" in errs[0] and "finished:" not in errs[1]
    assert (tmp_path / "two" / "train.log").read_text().count("step 6:") == 1
    assert not (tmp_path / "two" / "checkpoints").exists()
    # The same losses (in-batch negatives and FLOPS over the gathered batch) and weights.
    assert [float(r["loss"]) for r in rows] == \
        [float(r["loss"]) for r in _log_rows(tmp_path / "one")][:6] != []
    assert one["status"] == "ok"
    single, double = _weights(tmp_path / "one" / "final"), _weights(tmp_path / "two" / "final")
    diff = torch.cat([(double[k] - single[k]).abs().flatten() for k in single])
    # Equal up to summation order. Adam divides by sqrt(v), so where a gradient is ~0 that noise
    # can become a step of up to lr: allow a handful of such elements out of ~2M, none beyond sum(lr).
    assert (diff > 1e-5).sum() <= 10 and diff.max() < sum(float(r["lr"]) for r in rows)


def test_two_processes_killed_after_a_checkpoint_resume_to_identical_weights(tmp_path: Path) -> None:
    """Also: a rank does not read the checkpoint into its private memory.

    A long position table (256k x 32) makes the weights ~40 MB and the checkpoint ~120 MB
    (weights + AdamW moments), against ~300 MB of private memory a rank for Python and torch.
    """
    init = save_tiny_bert(tmp_path / "init", dropout=0.1, positions=2 ** 18)  # each rank draws its own dropout masks
    recipe = tiny_recipe(**RECIPE)
    procs = _launch(init, tmp_path / "a", recipe)
    ckpt = tmp_path / "a" / "checkpoints" / "step-0000004.pt"
    # killed while frozen with the step-4 checkpoint on disk: neither rank can have finished
    freeze_when([p.pid for p in procs], ckpt.exists, "the step-4 checkpoint", timeout=600)
    for p in procs:
        p.send_signal(signal.SIGKILL)
    assert [p.wait() for p in procs] == [-signal.SIGKILL] * 2 and not (tmp_path / "a" / "final").exists()
    rng = torch.load(ckpt, weights_only=False)["rng"]
    assert len(rng) == 2 and not torch.equal(rng[0]["torch"], rng[1]["torch"])  # one state per rank
    _, resumed_kb = _finish(_launch(init, tmp_path / "a", recipe))
    _, straight_kb = _finish(_launch(init, tmp_path / "b", recipe))
    resumed, straight = _weights(tmp_path / "a" / "final"), _weights(tmp_path / "b" / "final")
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)
    assert [int(r["step"]) for r in _log_rows(tmp_path / "a")] == list(range(1, 7))
    # Before its first step a resumed rank holds one more private copy of the weights than an
    # uninterrupted one: most pages of the weights loaded from the init folder are not private
    # until written, which the resumed rank does with the checkpoint's (the uninterrupted one
    # at its first step). The checkpoint's own pages stay in the page cache (the AdamW moments
    # become private at the first step, when an uninterrupted run allocates its own); read
    # eagerly, its AdamW moments, 2x the weights, would stay in each rank's private memory.
    # Measured at that point, as each rank reports it: +0.9x the weights mapped, +2.75x read
    # eagerly (torch.load without mmap). Margin: half the weights' size, for allocator and
    # import noise between two processes.
    weights_kb = sum(t.numel() * t.element_size() for t in straight.values()) // 1024
    assert all(r - s < 1.5 * weights_kb for r, s in zip(resumed_kb, straight_kb)), (resumed_kb, straight_kb)


# The trainer's CLI, each rank printing the timeout its process group got and each barrier it passed,
# after which of its own checkpoint saves (rank 0 saves, the others none).
_TRAIN_REPORTING_COLLECTIVES = """
import sys
import torch.distributed as dist
from splade_rescale.training import train

saved, save, init, barrier = [], train._save_checkpoint, dist.init_process_group, dist.barrier

def save_reported(folder, state, keep):
    save(folder, state, keep)
    saved.append(state["step"])

def init_reported(*args, **kwargs):
    print(f"timeout: {kwargs.get('timeout')}", file=sys.stderr, flush=True)
    init(*args, **kwargs)

def barrier_reported(*args, **kwargs):
    barrier(*args, **kwargs)
    print(f"barrier after saves {saved}", file=sys.stderr, flush=True)

train._save_checkpoint, dist.init_process_group, dist.barrier = save_reported, init_reported, barrier_reported
train.main(sys.argv[1:])
"""


def test_ranks_wait_for_a_checkpoint_save_at_a_barrier_under_an_explicit_timeout(tmp_path: Path) -> None:
    """Without the barrier the others wait for rank 0's save inside the next step's all-reduce; without an
    explicit timeout, a rank that died holds the others for the backend's default."""
    procs = _launch(save_tiny_bert(tmp_path / "init", dropout=0.0), tmp_path / "out", tiny_recipe(**RECIPE),
                    _TRAIN_REPORTING_COLLECTIVES)
    with ThreadPoolExecutor(2) as pool:
        errs = list(pool.map(lambda p: p.communicate(timeout=600)[1], procs))
    assert [p.returncode for p in procs] == [0, 0], errs[0][-2000:] + errs[1][-2000:]
    reported = [[line for line in err.splitlines() if line.startswith(("timeout:", "barrier"))] for err in errs]
    assert reported[0] == ["timeout: 0:30:00", "barrier after saves [2]", "barrier after saves [2, 4]"]
    assert reported[1] == ["timeout: 0:30:00", "barrier after saves []", "barrier after saves []"]
