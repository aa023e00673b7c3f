"""GPUs on one machine: which torch build is installed, and each GPU job's claim on device ids of its own.

Standard library only, so that the workflow's main process and a job's first lines run it before
(or without) importing torch.

A run on one machine lets ``--resources gpu=N`` GPU jobs start at once; this is what gives each of
them its own devices. The workflow hands its jobs the pool of device ids it saw at start
(:data:`POOL_VAR`). A job asking for g GPUs takes g ids of the pool that no running job holds, each
by an exclusive ``flock`` on a lock file per id, and sets ``CUDA_VISIBLE_DEVICES`` to them before
torch starts. The locks belong to the job's process (kept across ``exec``, so the DDP launcher
that replaces it holds them), and the kernel drops them when it ends, however it ends (SIGKILL
included): no claim outlives its job, so none blocks the next job or the next run. A DDP rank dies
with its launcher (:func:`die_with_parent`), so no rank goes on using GPUs whose claim is gone.
The lock files are the host's (:func:`claims_folder`), so two runs on one machine, from one
checkout or two, never share a GPU, and runs on two nodes of a shared file system never wait on
each other.
"""

from __future__ import annotations

import ast
import ctypes
import fcntl
import importlib.util
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

# JSON {"ids": [...], "claims": folder}: set by the workflow for the jobs of a run on one machine
POOL_VAR = "SPLADE_RESCALE_GPU_POOL"
# "1": GPU jobs may run on a torch without CUDA where GPUs are visible. The workflow otherwise stops
# there (the silent-CPU trap of a CPU install on a GPU machine); the tests set it to run the device
# claims of a GPU machine on a CPU torch.
CPU_TORCH_VAR = "SPLADE_RESCALE_ALLOW_CPU_TORCH"
# the pid of a DDP launcher, for its ranks: a rank whose parent is no longer it stops at once
LAUNCHER_VAR = "SPLADE_RESCALE_DDP_LAUNCHER"


def torch_build() -> dict[str, str | None]:
    """The installed torch's version and the CUDA it was built with (None: a CPU build), read from
    ``torch/version.py`` without importing torch (an import costs seconds); {} without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    values: dict[str, str | None] = {"version": None, "cuda": None}
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        name = {"__version__": "version", "cuda": "cuda"}.get(getattr(target, "id", ""))
        if name and isinstance(node.value, ast.Constant):
            values[name] = node.value.value
    return values


def torch_label(build: Mapping[str, str | None]) -> str:
    """How a run's first line and the preflight name a :func:`torch_build`: "torch 2.13.0+cpu (no CUDA)"."""
    return f"torch {build.get('version')} ({'CUDA ' + build['cuda'] if build.get('cuda') else 'no CUDA'})"


def no_gpu_shown(device: str, environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """What a ``device: cuda`` run meets on a machine that shows no GPU, and its fix (the run's stop and the
    preflight say the same)."""
    return (f"device: {device}, but this machine shows no GPU (CUDA_VISIBLE_DEVICES="
            f"{environ.get('CUDA_VISIBLE_DEVICES', '(unset)') or '(empty)'}, no /dev/nvidiaN this user can open)",
            "run where GPUs are visible (docker run --gpus all, a SLURM GPU allocation, CUDA_VISIBLE_DEVICES "
            "unset), or set `device: auto` in the config to run on the CPU")


def _lock_path(folder: Path, device: str) -> Path:
    return folder / f"gpu-{device.replace('/', '_')}.lock"


# File systems shared by several machines: a lock there is seen by (or, where flock is emulated, fails on)
# another node, whose GPUs are not this one's
SHARED_FILE_SYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "ceph", "fuse.sshfs",
                       "fuse.glusterfs", "9p")


def claims_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """This user's GPU claims on this host: in the temporary folder (``TMPDIR``, else /tmp), local to the
    machine, not in the checkout, which a cluster's nodes share."""
    base = environ.get("TMPDIR") or tempfile.gettempdir()
    return Path(base) / f"splade-rescale-gpu-claims-{os.getuid()}"


def file_system(path: Path, mounts: Path = Path("/proc/self/mounts")) -> str:
    """The type of the file system ``path`` lies on (its longest mount point in ``mounts``)."""
    path, best, kind = Path(os.path.abspath(path)), -1, ""
    for line in mounts.read_text().splitlines():
        fields = line.split()
        point = Path(fields[1].replace("\\040", " "))
        if (point == path or point in path.parents) and len(point.parts) > best:
            best, kind = len(point.parts), fields[2]
    return kind


def check_claims_folder(folder: Path, mounts: Path = Path("/proc/self/mounts")) -> None:
    """Stop, in one line, where GPU claims cannot work: ``folder`` on a file system shared by several
    machines, or one where flock fails."""
    kind = file_system(folder, mounts) if mounts.is_file() else ""
    if kind in SHARED_FILE_SYSTEMS:
        raise RuntimeError(f"GPU claims at {folder} would be on a {kind} file system shared by several machines: "
                           "point TMPDIR at a disk of this machine (/tmp, a node's local scratch)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / "check.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: runs checking at once never block
        finally:
            os.close(fd)
    except OSError as exc:
        raise RuntimeError(f"GPU claims need file locks (flock) in {folder}, which failed ({exc}): point TMPDIR "
                           "at a disk of this machine that supports them (/tmp, a node's local scratch)") from None


def _try_claim(pool: Sequence[str], count: int, folder: Path, holder: str) -> list[tuple[str, int]]:
    """``count`` ids of ``pool`` (in pool order) locked for this process, or [] with none kept."""
    held: list[tuple[str, int]] = []
    for device in pool:
        fd = os.open(_lock_path(folder, device), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, holder.encode())
        held.append((device, fd))
        if len(held) == count:
            return held
    for _, fd in held:  # all or nothing: a part claim held while waiting could deadlock two DDP jobs
        os.close(fd)
    return []


def holders(pool: Sequence[str], folder: Path) -> dict[str, str]:
    """What each id's lock file says of its last holder (for a message; a free id may show one)."""
    return {d: p.read_text().strip() for d in pool if (p := _lock_path(folder, d)).is_file()}


def held(pool: Sequence[str], folder: Path) -> list[str]:
    """The ids of ``pool`` whose lock a process holds now (a running job's claim), without claiming any:
    for a check that must not wait on them."""
    taken = []
    for device in pool:
        if not (path := _lock_path(folder, device)).is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            taken.append(device)
        finally:
            os.close(fd)  # and the lock with it
    return taken


def claim(pool: Sequence[str], count: int, folder: Path, holder: str, poll_s: float = 0.2) -> list[str]:
    """Lock ``count`` free ids of ``pool`` for this process and return them; waits while fewer are free.

    Within one run Snakemake's ``gpu`` resource keeps a free id for every job it starts, so a wait
    lasts only as long as a just-ended job's exit; longer, another run in the same folder holds them.
    """
    if count > len(pool):
        raise ValueError(f"a job asks for {count} GPUs, but the run's pool has {len(pool)}: {','.join(pool)}")
    folder.mkdir(parents=True, exist_ok=True)
    waiting = False
    while not (held := _try_claim(pool, count, folder, holder)):
        if not waiting:
            log.info("waiting for %d free GPU(s) of %s; held: %s", count, ",".join(pool), holders(pool, folder))
            waiting = True
        time.sleep(poll_s)
    for _, fd in held:  # open for the life of the process, and across an exec (torchrun)
        os.set_inheritable(fd, True)
    return [device for device, _ in held]


def claim_for_job(gpus: int, job: str, environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """The devices of a GPU job of a run on one machine: ``gpus`` ids claimed from the workflow's
    pool and set as CUDA_VISIBLE_DEVICES (torch then numbers them 0..gpus-1, so a DDP rank's
    LOCAL_RANK indexes them), named in the job's first log line. Nothing where no pool is given
    (a cluster job: its scheduler chose the devices), for a job without GPUs, or in a torchrun rank
    (its launcher claimed them)."""
    spec = environ.get(POOL_VAR)
    if not spec or gpus <= 0 or "LOCAL_RANK" in environ:
        return []
    pool = json.loads(spec)
    ids = claim(pool["ids"], gpus, Path(pool["claims"]), f"pid {os.getpid()}: {job}")
    environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    log.info("claimed GPU(s) %s (pid %d; %d of the run's GPUs %s)", ",".join(ids), os.getpid(), gpus,
             ",".join(pool["ids"]))
    return ids


def hide_gpus(environ: MutableMapping[str, str] = os.environ) -> None:
    """Every job of this run sees no GPU (``CUDA_VISIBLE_DEVICES=""``): else each job's torch would take
    GPU 0, as many at once as run."""
    environ["CUDA_VISIBLE_DEVICES"] = ""


def handed_ids(environ: Mapping[str, str] = os.environ) -> str:
    """The GPU ids CUDA_VISIBLE_DEVICES hands this process ("" where unset, empty or hiding all)."""
    ids = [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    return ",".join(d for d in (ids[:ids.index("-1")] if "-1" in ids else ids) if d)


def check_devices(cuda_devices: int, torch_version: str, refuse_cpu: bool = True,
                  environ: Mapping[str, str] = os.environ) -> None:
    """Log the devices this process sees (CUDA_VISIBLE_DEVICES as it reads it, not as a claim meant it),
    and stop a process handed GPU ids that finds no CUDA device: it would run on the CPU, 10 to 100
    times slower, without a word (``refuse_cpu``: the device is ``auto``; ``device: cpu`` or
    :data:`CPU_TORCH_VAR` runs it there); or that finds fewer than it was handed (MIG instances), where
    a DDP training would fail only once its ranks meet."""
    ids = handed_ids(environ)
    log.info("devices: CUDA_VISIBLE_DEVICES=%s (pid %d; torch sees %d CUDA device(s))",
             environ.get("CUDA_VISIBLE_DEVICES", "(unset)").replace(" ", "") or "(empty)", os.getpid(), cuda_devices)
    if refuse_cpu and ids and not cuda_devices and environ.get(CPU_TORCH_VAR) != "1":
        raise RuntimeError(f"CUDA_VISIBLE_DEVICES={ids} hands this job GPU(s), but torch {torch_version} finds no "
                           "CUDA device: give ids CUDA knows (0..n-1 of `nvidia-smi -L`, or GPU UUIDs), a CUDA "
                           "torch (`make install TORCH=cuda`) and, in a container, --gpus; or set `device: cpu` "
                           "in the config to run on the CPU")
    if 0 < cuda_devices < len(handed := ids.split(",")):
        raise RuntimeError(f"CUDA_VISIBLE_DEVICES={ids} hands this job {len(handed)} GPUs, but torch sees "
                           f"{cuda_devices}: CUDA shows one MIG instance to a process, so a DDP training cannot span "
                           "MIG instances; give it whole GPUs, or train_gpus: 1 on a MIG instance")


def exec_ranks(count: int, args: Sequence[str]) -> None:
    """Replace this process (and its claim's locks with it) by DDP's launcher running ``count`` ranks of
    ``python args``: this Python's ``-m torch.distributed.run``, the torch of this install, not whatever
    ``torchrun`` is first on PATH."""
    os.environ[LAUNCHER_VAR] = str(os.getpid())  # the launcher keeps this pid across the exec
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={count}", *args])


def die_with_parent() -> None:
    """In a DDP rank: get SIGKILL when the launcher ends (Linux PR_SET_PDEATHSIG), however it ends.
    A SIGKILLed launcher cannot stop its ranks, and its claim ends with it: a rank left running would
    share its GPUs with the next job given them."""
    launcher = os.environ.get(LAUNCHER_VAR)
    if not sys.platform.startswith("linux") or not launcher:
        return
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != int(launcher):  # the launcher ended before the prctl
        os.kill(os.getpid(), signal.SIGKILL)
