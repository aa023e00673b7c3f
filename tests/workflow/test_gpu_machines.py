"""A GPU server, a container or a cluster node: where the GPU jobs run, which GPUs a run takes, what
memory it declares, and the CPU demo on a machine with a GPU.

The GPUs are synthetic (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES and /dev trees in a test folder):
this machine has none, and torch no CUDA. The workflow tests run the real Snakemake scheduler; the
jobs that run are real ones (a published model's query encoding), whose log names the
CUDA_VISIBLE_DEVICES the job itself saw.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from splade_rescale.config import host_memory_mb, load_config, visible_device_ids
from splade_rescale.gpus import CPU_TORCH_VAR, check_claims_folder, check_devices, claims_folder
from support.workflow import ENV, WITH_BIN, copy_workflow, snakemake

PLAIN = {
    k: v for k, v in WITH_BIN.items() if k not in (CPU_TORCH_VAR, "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
}


def _linked(folder: Path) -> Path:
    """``folder`` with the repository's workflow linked in, apart from its results/."""
    for name in ("Snakefile", "workflow", "config", "resources", "envs"):
        if not (folder / name).exists():
            (folder / name).symlink_to(REPO / name)
    return folder


def _run(folder: Path, *args: str, env: dict[str, str] | None = None, **extra: str) -> subprocess.CompletedProcess:
    return snakemake(
        "all",
        "--cores",
        "8",
        "--configfile",
        "config/demo.yaml",
        *args,
        cwd=_linked(folder),
        env={**(env or PLAIN), **extra},
    )


def _lines(proc: subprocess.CompletedProcess) -> list[str]:
    return (proc.stdout + proc.stderr).splitlines()


# ------------------------------------------------------------------------------------- GPUs


def test_a_gpu_config_stops_where_no_gpu_shows_and_a_dry_run_still_plans(tmp_path: Path) -> None:
    assert load_config(REPO / "config/config.yaml")["device"] == "cuda"  # the paper config says it needs GPUs
    for demo in ("config/demo.yaml", "config/miniature.yaml"):
        assert load_config(REPO / demo)["device"] == "auto"
    stop = (
        "device: cuda, but this machine shows no GPU (CUDA_VISIBLE_DEVICES={}, no /dev/nvidiaN this user can "
        "open): run where GPUs are visible (docker run --gpus all, a SLURM GPU allocation, CUDA_VISIBLE_DEVICES "
        "unset), or set `device: auto` in the config to run on the CPU"
    )
    for hidden, shown in ((None, "(unset)"), ("", "(empty)")):  # docker without --gpus; CUDA_VISIBLE_DEVICES=""
        env = {**PLAIN, **({} if hidden is None else {"CUDA_VISIBLE_DEVICES": hidden})}
        run = _run(tmp_path, "--touch", "--config", "device=cuda", env=env)  # --touch: a run, no command
        assert run.returncode != 0 and stop.format(shown) in _lines(run), run.stderr[-2000:]
        assert not (tmp_path / "results").exists()
        dry = _run(tmp_path, "-n", "--config", "device=cuda", env=env)
        assert dry.returncode == 0 and stop.format(shown) in _lines(dry) and "Job stats:" in dry.stdout
    auto = _run(tmp_path, "-n")
    assert (
        _lines(auto)[0]
        == "torch 2.13.0+cpu (no CUDA); GPUs: none: GPU jobs (train, encode) run on the CPU (device: auto)"
    )


def test_nvidia_visible_devices_and_device_files_this_user_cannot_open(tmp_path: Path) -> None:
    """A privileged pod shows the host's eight /dev/nvidiaN; the runtime's list says which two are its own."""
    host = tmp_path / "host"
    host.mkdir()
    for i in range(8):
        (host / f"nvidia{i}").touch()
    assert visible_device_ids({"NVIDIA_VISIBLE_DEVICES": "2,5"}, host) == ["2", "5"]
    assert visible_device_ids({"NVIDIA_VISIBLE_DEVICES": "GPU-a, GPU-b"}, host) == ["GPU-a", "GPU-b"]
    assert visible_device_ids({"NVIDIA_VISIBLE_DEVICES": "none"}, host) == []
    for whole in ("all", "void", ""):
        assert len(visible_device_ids({"NVIDIA_VISIBLE_DEVICES": whole}, host)) == 8
    container = tmp_path / "container"  # docker --gpus '"device=2,5"': two files, the host's numbers
    container.mkdir()
    for i in (2, 5):
        (container / f"nvidia{i}").touch()
    assert visible_device_ids({"NVIDIA_VISIBLE_DEVICES": "2,5"}, container) == ["0", "1"]  # CUDA's ordinals
    (container / "nvidia7").symlink_to(tmp_path / "gone")  # a file shown that cannot be opened (cgroup, mode)
    (container / "nvidia8").mkdir()
    assert visible_device_ids({}, container) == ["0", "1"]


def test_gpus_per_job_0_and_a_cpu_torch_on_a_gpu_machine_hide_the_gpus_from_every_job(tmp_path_factory) -> None:
    """Real jobs (a published model's query encoding) on a machine showing GPUs 0 and 1: with
    ``gpus_per_job: 0`` each would otherwise take GPU 0, as many at once as run; and the demo's CPU torch
    runs as on a laptop (``device: auto``) instead of stopping."""
    root = copy_workflow(tmp_path_factory.mktemp("hidden"), ("demo",))
    target = "results/demo/encoded/splade-tiny/published/queries/scifact.jsonl"
    log = root / "results/demo/logs/encode_queries/splade-tiny.published.log"
    env = {**{k: v for k, v in ENV.items() if k != CPU_TORCH_VAR}, "CUDA_VISIBLE_DEVICES": "0,1"}
    seen = {}
    for name, extra in (("gpus_per_job: 0", ["--config", "gpus_per_job=0"]), ("cpu torch", ["-R", "encode_queries"])):
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", target, "--cores", "2", "--configfile", "config/demo.yaml", *extra],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[name] = (
            proc.stderr.splitlines()[0],
            re.search(r"devices: CUDA_VISIBLE_DEVICES=(\S+)", log.read_text())[1],
        )
    assert seen["gpus_per_job: 0"] == (
        "torch 2.13.0+cpu (no CUDA); GPUs: none used (gpus_per_job: 0): GPU jobs (train, encode) run on the CPU",
        "(empty)",
    )
    assert seen["cpu torch"] == (
        "torch 2.13.0+cpu (no CUDA); GPUs: 0,1, unused: GPU jobs (train, encode) run on the CPU (device: auto with "
        "a CPU torch; `make install TORCH=cuda` runs them on the GPUs)",
        "(empty)",
    )


def test_a_gpu_named_twice_is_one_gpu(tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES=0,0: a two-GPU training is refused before any job (it waited for ever for a
    second claim on GPU 0)."""
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": "0,0"}) == ["0"]
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": "1, 0,1"}) == ["1", "0"]
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["backbones"]["minilm"]["train_gpus"] = 2
    (tmp_path / "ddp.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(
        "all",
        "-n",
        "--cores",
        "8",
        "--configfile",
        str(tmp_path / "ddp.yaml"),
        cwd=_linked(tmp_path),
        env={**PLAIN, "CUDA_VISIBLE_DEVICES": "0,0", CPU_TORCH_VAR: "1"},
    )
    assert proc.returncode != 0
    assert (
        "backbones.minilm.train_gpus: 2, but this run has 1 GPU(s) (0): lower it or give the run more GPUs"
        in _lines(proc)
    ), proc.stdout[-2000:]


def test_a_job_seeing_fewer_cuda_devices_than_it_was_handed_stops(caplog) -> None:
    """Two MIG instances handed to a DDP training: CUDA shows a process one of them."""
    with pytest.raises(RuntimeError) as stop:
        check_devices(1, "2.13.0", environ={"CUDA_VISIBLE_DEVICES": "MIG-a,MIG-b"})
    assert str(stop.value) == (
        "CUDA_VISIBLE_DEVICES=MIG-a,MIG-b hands this job 2 GPUs, but torch sees 1: CUDA shows "
        "one MIG instance to a process, so a DDP training cannot span MIG instances; give it "
        "whole GPUs, or train_gpus: 1 on a MIG instance"
    )
    check_devices(1, "2.13.0", environ={"CUDA_VISIBLE_DEVICES": "MIG-a"})
    check_devices(2, "2.13.0", environ={"CUDA_VISIBLE_DEVICES": "0,1"})


def test_claims_are_the_hosts_outside_the_checkout_and_stop_where_locks_cannot_work(tmp_path: Path) -> None:
    local = tmp_path / "local"
    local.mkdir()
    env = {**PLAIN, "CUDA_VISIBLE_DEVICES": "0,1", CPU_TORCH_VAR: "1", "TMPDIR": str(local)}
    folder = local / f"splade-rescale-gpu-claims-{os.getuid()}"
    assert claims_folder({"TMPDIR": str(local)}) == folder
    for checkout in ("a", "b"):  # two checkouts on one machine claim from one folder
        (tmp_path / checkout).mkdir()
        proc = _run(tmp_path / checkout, "-n", env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"each on GPUs of its own of 0,1 (claims in {folder})" in proc.stdout, proc.stdout[:2000]
        assert not (tmp_path / checkout / ".snakemake/gpu-claims").exists()
    (tmp_path / "file").touch()
    proc = _run(tmp_path / "a", "-n", env={**env, "TMPDIR": str(tmp_path / "file")})
    assert proc.returncode != 0
    assert (
        f"GPU claims need file locks (flock) in {tmp_path}/file/splade-rescale-gpu-claims-{os.getuid()}, which "
        "failed ([Errno 20] Not a directory: "
    ) in proc.stdout + proc.stderr, proc.stdout[-2000:]
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/home {tmp_path} nfs4 rw 0 0\n")
    with pytest.raises(
        RuntimeError,
        match=r"on a nfs4 file system shared by several machines: point TMPDIR at a "
        r"disk of this machine",
    ):
        check_claims_folder(folder, mounts)
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/home {tmp_path / 'elsewhere'} nfs4 rw 0 0\n")
    check_claims_folder(folder, mounts)


# ------------------------------------------------------------------------------------ memory


def test_the_machines_memory_is_the_cap_or_its_cgroups(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text("MemTotal:       16000000 kB\nMemFree:  1 kB\n")
    (tmp_path / "proc/self/cgroup").write_text("0::/\n")
    assert host_memory_mb(tmp_path) == 16_384  # no limit
    pod = tmp_path / "sys/fs/cgroup/kubepods/pod1"  # cgroup v2: a pod's limit, a level above the process
    (pod / "c1").mkdir(parents=True)
    (pod / "memory.max").write_text("8000000000\n")
    (pod / "c1/memory.max").write_text("max\n")
    (tmp_path / "proc/self/cgroup").write_text("0::/kubepods/pod1/c1\n")
    assert host_memory_mb(tmp_path) == 8000
    job = tmp_path / "sys/fs/cgroup/memory/slurm/job_1"  # cgroup v1: a SLURM job's
    job.mkdir(parents=True)
    (job / "memory.limit_in_bytes").write_text("4000000000\n")
    (tmp_path / "proc/self/cgroup").write_text("4:memory:/slurm/job_1\n1:cpu:/\n")
    assert host_memory_mb(tmp_path) == 4000


def test_a_mem_mb_below_a_jobs_declaration_is_said(tmp_path: Path) -> None:
    proc = _run(tmp_path, "-n", "--resources", "mem_mb=5000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        "mem_mb=5000 is below what bm25_index (8000), impact_retrieve (8000), bm25_retrieve (8000), "
        "mine_negatives (8000) declare: they run with 5000 MB, a Lucene job's JVM heap three quarters of it, and "
        "may run out of memory; --resources mem_mb=8000 or more keeps their figures"
    ) in _lines(proc)
    quiet = _run(tmp_path, "-n", "--resources", "mem_mb=8000")
    assert "is below what" not in quiet.stdout + quiet.stderr
