"""Each GPU job of a run on one machine gets device ids of its own, and a GPU machine with a CPU torch stops.

The workflow test runs real train and encode jobs of tiny models with four device ids made
visible (CUDA_VISIBLE_DEVICES=0,1,2,3) and ``--resources gpu=4``. The ids are synthetic: this
machine has no GPU and torch no CUDA, so the jobs claim the ids as on a GPU machine and then run
on the CPU, which the test allows explicitly (SPLADE_RESCALE_ALLOW_CPU_TORCH). Each job's log names
the CUDA_VISIBLE_DEVICES the job itself sees (in a DDP training, each rank) and its pid: what the
assertions read, so a claim that never reached the job's environment fails them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TRIPLES
from splade_rescale.gpus import CPU_TORCH_VAR
from support.training import TINY_SIZES
from support.workflow import ENV, TINY_CHAIN_DATA, WITH_BIN, copy_workflow, snakemake, tiny_config

DEVICES = re.compile(r"^(\S+ \S+) INFO splade_rescale\.gpus: devices: CUDA_VISIBLE_DEVICES=(\S+) \(pid (\d+);", re.M)
EXPERIMENT = "gpu-claims"
RESULTS = f"results/{EXPERIMENT}"
MODELS = ("tiny", "tiny-b", "ddp")
VICTIM = f"{RESULTS}/logs/encode_queries/tiny-b.baseline.log"  # SIGKILLed once its devices are claimed


def _holder(pool: str, count: int, seconds: float) -> subprocess.Popen:
    """A process that claims ``count`` ids of ``pool`` (printing them) and then sleeps."""
    code = ("import logging, time; from splade_rescale.gpus import claim_for_job; logging.basicConfig(level=20);"
            f"print(','.join(claim_for_job({count}, 'test')), flush=True); time.sleep({seconds})")
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "SPLADE_RESCALE_GPU_POOL": pool},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_claim_takes_free_ids_only_and_a_killed_holder_frees_them(tmp_path: Path) -> None:
    pool = f'{{"ids": ["0", "1", "2"], "claims": "{tmp_path}"}}'
    first = _holder(pool, 2, 600)
    assert first.stdout.readline().strip() == "0,1"
    second = _holder(pool, 1, 0)
    assert second.communicate(timeout=60)[0].strip() == "2"  # 0 and 1 are held: the free one
    waiting = _holder(pool, 3, 0)  # needs all three: waits while the first holds two
    time.sleep(1.0)
    assert waiting.poll() is None
    first.send_signal(signal.SIGKILL)
    first.wait()
    out, err = waiting.communicate(timeout=60)
    assert out.strip() == "0,1,2", err  # the kernel dropped the killed process's locks
    assert "waiting for 3 free GPU(s) of 0,1,2; held: " in err and "pid" in err
    _, err = _holder(pool, 4, 0).communicate(timeout=60)
    assert "asks for 4 GPUs, but the run's pool has 3" in err
    plain = subprocess.run([sys.executable, "-c", "from splade_rescale.gpus import claim_for_job;"
                            "print(claim_for_job(1, 'test'))"], env={k: v for k, v in os.environ.items()
                                                                      if k != "SPLADE_RESCALE_GPU_POOL"},
                           capture_output=True, text=True, timeout=60)
    assert plain.stdout.strip() == "[]"  # no pool (a cluster job): nothing claimed, nothing set


def test_a_job_handed_gpu_ids_without_a_cuda_device_stops_in_one_line(monkeypatch, caplog) -> None:
    """This machine's torch has no CUDA device: what a job given ids CUDA does not know (a container's
    /dev numbers) or a CPU torch on a GPU machine meets. ``device: auto`` stops there, ``cpu`` does not."""
    import torch

    from splade_rescale.model.splade import resolve_device
    monkeypatch.delenv(CPU_TORCH_VAR, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    with caplog.at_level("INFO", logger="splade_rescale.gpus"), pytest.raises(RuntimeError) as stop:
        resolve_device("auto")
    message = str(stop.value)
    assert "\n" not in message and message.startswith("CUDA_VISIBLE_DEVICES=2,5 hands this job GPU(s), but torch")
    assert "nvidia-smi -L" in message and "make install TORCH=cuda" in message and "device: cpu" in message
    assert f"devices: CUDA_VISIBLE_DEVICES=2,5 (pid {os.getpid()}; torch sees 0 CUDA device(s))" in caplog.text
    assert resolve_device("cpu") == torch.device("cpu")  # the config's device: cpu runs there
    monkeypatch.setenv(CPU_TORCH_VAR, "1")  # the tests' explicit escape hatch
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.delenv(CPU_TORCH_VAR)
    for hidden in ("", "-1"):  # no GPU handed over: the CPU is what was asked for
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert resolve_device("auto") == torch.device("cpu")


RANK = """import os, time
from splade_rescale.gpus import die_with_parent
die_with_parent()
# one write a line (atomic on a pipe): the two ranks' lines never interleave, buffered or not
os.write(1, f'{os.environ["LOCAL_RANK"]} {os.getpid()} {os.environ["CUDA_VISIBLE_DEVICES"]}\\n'.encode())
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except (FileNotFoundError, IndexError):
        return False


def test_the_ddp_launcher_keeps_the_claim_and_its_ranks_die_with_it(tmp_path: Path) -> None:
    """The claim's locks outlive the exec into the launcher, which is this Python's torch.distributed.run
    (a `torchrun` first on PATH is not run), and SIGKILLing the launcher ends its ranks (real
    torch.distributed.run on the CPU; the ids 0 and 1 are synthetic)."""
    from splade_rescale.gpus import holders
    (tmp_path / "rank.py").write_text(RANK)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text("#!/bin/sh\necho 'the torchrun on PATH ran' >&2; exit 99\n")
    (fake / "torchrun").chmod(0o755)
    pool = f'{{"ids": ["0", "1"], "claims": "{tmp_path / "claims"}"}}'
    code = ("import logging; from splade_rescale.gpus import claim_for_job, exec_ranks; logging.basicConfig(level=20);"
            f"claim_for_job(2, 'ddp test'); exec_ranks(2, [{str(tmp_path / 'rank.py')!r}])")
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "SPLADE_RESCALE_GPU_POOL": pool,
                                                "PATH": f"{fake}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"})
    ranks: dict[str, int] = {}
    try:
        for _ in range(2):
            line = launcher.stdout.readline().split()
            assert len(line) == 3, (line, launcher.stderr.read() if launcher.poll() is not None else "")
            ranks[line[0]] = int(line[1])
            assert line[2] == "0,1"  # each rank sees the launcher's claim
        cmdline = Path(f"/proc/{launcher.pid}/cmdline").read_text().split("\0")
        assert cmdline[:3] == [sys.executable, "-m", "torch.distributed.run"], cmdline
        # the exec'd launcher, same pid, still holds both ids: a claim by anyone else waits
        assert holders(["0", "1"], tmp_path / "claims") == {d: f"pid {launcher.pid}: ddp test" for d in "01"}
        probe = _holder(pool, 1, 0)
        time.sleep(2.0)
        assert probe.poll() is None  # waiting: both ids are the launcher's
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert probe.communicate(timeout=60)[0].strip() == "0"  # the kernel dropped the launcher's locks
        end = time.monotonic() + 30
        while any(map(_alive, ranks.values())) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(map(_alive, ranks.values())), ranks  # no rank outlived its launcher
    finally:
        launcher.kill()
        for pid in ranks.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _config() -> dict:
    config = tiny_config(EXPERIMENT)
    sizes = {"source": "config", "architecture": "bert", "sizes": TINY_SIZES}
    config["backbones"] = {"tiny": sizes, "tiny-b": {**sizes, "seed": 1}, "ddp": {**sizes, "seed": 2, "train_gpus": 2}}
    config["variants"] = {"baseline": {"policy": "constant", "factor": 1}}
    config.update(device="auto", gpus_per_job=1)  # as on a GPU machine: one GPU per job, two for ddp's training
    config["training"] = {"recipe": "tiny", "data": TRIPLES, "threads": 1,
                          "overrides": {"ddp": {"grad_accumulation": 1}}}  # 4 queries a step: 2 per rank
    return config


def _targets() -> list[str]:
    return [f"{RESULTS}/encoded/{m}/baseline/{what}" for m in MODELS
            for what in ("corpora/scifact.stats.json", "queries/scifact.jsonl")]


def _claims(root: Path) -> dict[str, dict]:
    """Each GPU job's claim from its log: {log: {"ids", "pid", "start", "end"}}; end: the log's last write."""
    jobs = {}
    for log in sorted((root / RESULTS / "logs").glob("*/*.log")):
        found = DEVICES.search(log.read_text())
        if found:
            when = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            jobs[str(log.relative_to(root))] = {"ids": found.group(2).split(","), "pid": int(found.group(3)),
                                                "start": when, "end": log.stat().st_mtime}
    return jobs


@pytest.fixture(scope="module")
def claimed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, float, subprocess.CompletedProcess]:
    """The workflow's train and encode jobs on four visible ids, one encode_queries job SIGKILLed
    once it holds its id (--keep-going: the others finish), then the rerun of that job alone with the
    killed job's id first in the pool."""
    root = copy_workflow(tmp_path_factory.mktemp("claims"), TINY_CHAIN_DATA)
    (root / "config/test.yaml").write_text(yaml.safe_dump(_config()))
    env = {**ENV, "CUDA_VISIBLE_DEVICES": "0,1,2,3", CPU_TORCH_VAR: "1"}
    def args(gpus: int) -> list[str]:
        return [sys.executable, "-m", "snakemake", *_targets(), "--cores", "4", "--resources", f"gpu={gpus}",
                "--configfile", "config/test.yaml"]

    run = subprocess.Popen([*args(4), "--keep-going"], cwd=root, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    victim, killed_at, end = root / VICTIM, None, time.monotonic() + 1200
    while killed_at is None and run.poll() is None and time.monotonic() < end:
        found = DEVICES.search(victim.read_text()) if victim.is_file() else None
        if found:
            os.kill(int(found.group(3)), signal.SIGKILL)
            killed_at = time.time()
        time.sleep(0.05)
    output = run.communicate(timeout=1200)[0]
    assert killed_at is not None, output[-4000:]
    assert run.returncode != 0 and "encode_queries" in output, output[-4000:]  # the killed job failed
    jobs = _claims(root)
    jobs[VICTIM]["end"] = killed_at
    # the next run, on the killed job's id and one other, reruns that job: its id is free again
    others = [d for d in ("0", "1", "2", "3") if d not in jobs[VICTIM]["ids"]]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(jobs[VICTIM]["ids"] + others[:1])
    rerun = subprocess.run(args(2), cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    return root, jobs, killed_at, rerun


def test_jobs_at_the_same_time_never_share_an_id(claimed_run) -> None:
    _, jobs, _, _ = claimed_run
    expected = {f"{RESULTS}/logs/{rule}/{m}.baseline.log" for m in MODELS for rule in ("train", "encode_queries")}
    expected |= {f"{RESULTS}/logs/encode_corpus/{m}.baseline.scifact.log" for m in MODELS}
    assert set(jobs) == expected, sorted(jobs)  # every GPU job named its devices, and only those
    names = sorted(jobs)
    overlapping = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
                   if jobs[a]["start"] < jobs[b]["end"] and jobs[b]["start"] < jobs[a]["end"]]
    for a, b in overlapping:
        assert not set(jobs[a]["ids"]) & set(jobs[b]["ids"]), (a, jobs[a], b, jobs[b])
    assert overlapping, jobs  # at least two ids in use at once
    assert all(set(job["ids"]) <= {"0", "1", "2", "3"} for job in jobs.values())


def test_a_ddp_training_holds_two_ids_of_its_own(claimed_run) -> None:
    root, jobs, _, _ = claimed_run
    ddp = jobs[f"{RESULTS}/logs/train/ddp.baseline.log"]
    assert len(set(ddp["ids"])) == 2
    for name, job in jobs.items():
        if job is not ddp and job["start"] < ddp["end"] and ddp["start"] < job["end"]:
            assert not set(job["ids"]) & set(ddp["ids"]), (name, job, ddp)
    log = (root / f"{RESULTS}/logs/train/ddp.baseline.log").read_text()
    assert "rank 1/2" in log, log[-3000:]  # both ranks ran, on the job's two ids


def test_a_killed_jobs_id_is_claimed_again(claimed_run) -> None:
    root, jobs, killed_at, rerun = claimed_run
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    found = DEVICES.search((root / VICTIM).read_text())
    assert found.group(2).split(",") == jobs[VICTIM]["ids"]  # the first id of the rerun's pool: not held
    assert datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() > killed_at
    assert (root / f"{RESULTS}/encoded/tiny-b/baseline/queries/scifact.jsonl").is_file()


# ------------------------------------------------------------------- the torch check, before any job

def _linked(folder: Path) -> Path:
    """``folder`` with the repository's workflow linked in, apart from its results/."""
    for name in ("Snakefile", "workflow", "config", "resources", "envs"):
        if not (folder / name).exists():
            (folder / name).symlink_to(REPO / name)
    return folder


def _dry_run(tmp_path: Path, *args: str, gpus: str | None = "0,1") -> subprocess.CompletedProcess:
    env = {k: v for k, v in WITH_BIN.items() if k != CPU_TORCH_VAR}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return snakemake("all", "-n", "--cores", "8", "--configfile", "config/demo.yaml", *args, cwd=_linked(tmp_path),
                     env=env)


def test_a_gpu_config_on_a_gpu_machine_with_a_cpu_torch_stops_before_any_job_unless_device_cpu(tmp_path: Path) -> None:
    """``device: cuda`` (the paper config's); ``device: auto`` runs on the CPU there (test_gpu_machines)."""
    proc = _dry_run(tmp_path, "--config", "device=cuda")
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "has no CUDA" in line]
    assert len(lines) == 1 and "make install TORCH=cuda" in lines[0] and "device: cpu" in lines[0], proc.stdout[-2000:]
    assert "torch 2.13.0+cpu (no CUDA); GPUs: 0,1" in proc.stdout
    assert "Job stats" not in proc.stdout and not (tmp_path / "results/demo").exists()
    proc = _dry_run(tmp_path, "--config", "device=cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "GPUs: none used (device: cpu)" in proc.stdout and "GPU jobs:" not in proc.stdout
    proc = _dry_run(tmp_path, gpus=None)  # this machine: no GPU, the CPU torch is what it needs
    assert proc.returncode == 0 and "GPUs: none" in proc.stdout, proc.stderr[-2000:]


def test_more_gpus_asked_than_shown_runs_on_those_shown_and_fewer_cores_say_so(tmp_path: Path) -> None:
    env_proc = snakemake("all", "-n", "--cores", "1", "--configfile", "config/demo.yaml", "--resources", "gpu=8",
                         cwd=_linked(tmp_path), env={**WITH_BIN, "CUDA_VISIBLE_DEVICES": "3,5", CPU_TORCH_VAR: "1"})
    assert env_proc.returncode == 0, env_proc.stderr[-2000:]
    assert "--resources gpu=8, but this machine shows 2 GPU(s): GPU jobs run 2 at once" in env_proc.stdout
    assert "GPU jobs: at most 2 at once (gpu=2), each on GPUs of its own of 3,5" in env_proc.stdout
    # one core, two GPUs: one GPU job holds the core, the other GPU idles, and the log says so
    assert re.search(r"--cores 1 holds threads for at most 1 GPU job\(s\) at once \(each holds 1\), so 1 of the 2 "
                     r"GPUs idle; --cores \d+ or more keeps all busy", env_proc.stdout), env_proc.stdout[:3000]
    default = snakemake("all", "-n", "--cores", "8", "--configfile", "config/demo.yaml", cwd=tmp_path,
                        env={**WITH_BIN, "CUDA_VISIBLE_DEVICES": "3,5", CPU_TORCH_VAR: "1"})
    assert "GPU jobs: at most 2 at once (gpu=2)" in default.stdout, default.stderr[-2000:]  # every GPU shown
    assert "8 cores keep all 2 GPU(s) busy" in default.stdout and "holds threads for" not in default.stdout


def test_make_plan_plans_for_the_gpus_and_cores_a_run_here_would_use(tmp_path: Path) -> None:
    """Three synthetic visible GPUs: the plan's schedule is for three, on the cores this process may
    use; GPUS= and PLAN_CORES= still choose another machine."""
    env = {**WITH_BIN, "CUDA_VISIBLE_DEVICES": "0,1,2", CPU_TORCH_VAR: "1"}
    proc = subprocess.run([sys.executable, "-m", "splade_rescale.cli", "plan", "--configfile", "config/demo.yaml",
                           "--out", str(tmp_path / "plan.md")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cores = len(os.sched_getaffinity(0))
    assert f"planned for 3 GPU(s) and {cores} cores: this machine shows 3" in proc.stderr
    assert f"## Schedule on {cores} cores and 3 GPU(s)" in proc.stdout
    make = subprocess.run(["make", "-n", "plan", "GPUS=8", "PLAN_CORES=64"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert "--cores 64 --gpus 8" in make.stdout, make.stdout
    plain = subprocess.run(["make", "-n", "plan"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "splade-rescale plan" in plain.stdout and "--gpus" not in plain.stdout and "--cores" not in plain.stdout


def test_the_docs_give_the_users_command_and_what_a_crash_a_container_and_a_cluster_need() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Running the paper's experiment"):readme.index("## Configuring")]
    commands = [line.split("#")[0].strip() for line in section.splitlines() if line.startswith("snakemake ")]
    assert commands == ["snakemake --cores 8 all"]
    assert "--rerun-incomplete" in section and "--unlock" in section and "--cores 64" in section
    paper = (REPO / "docs/experiments-paper.md").read_text()
    container = paper[paper.index("## In a container"):]
    for needed in ("--gpus", "results/", ".snakemake/", "HF_HOME", "IR_DATASETS_HOME"):
        assert needed in container, needed
    crash = paper[paper.index("## After a crash or a kill"):paper.index("## In a container")]
    assert "--rerun-incomplete" in crash and "--unlock" in crash and "kept" in crash
    slurm = (REPO / "docs/slurm.md").read_text()
    first_submit = slurm.index("**Before the first submit**")
    assert first_submit < slurm.index("## ") and "fetch_backbone" in slurm[first_submit:slurm.index("## ")]
