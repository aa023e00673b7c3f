"""The workflow on a real SLURM: a one-node cluster on this host, driven through a profile.

Runs only under ``make test-slurm`` (which installs Debian's slurm-wlm and munge and sets
SPLADE_RESCALE_SLURM_TEST=1); root is needed to start slurmd. Everything but slurm.conf lives
in a temporary folder: munge key and socket, daemon state and logs, and two copies of the
workflow (one run locally, one through SLURM), so the repository gets no results/.
slurm.conf goes to its default place, /etc/slurm/slurm.conf (removed afterwards; an existing
one that this test did not write stops the test): inside each job the plugin runs the rule
under ``srun`` with every SLURM_* variable but the job's identity removed, SLURM_CONF
included, so srun finds the cluster only there, as on a real site.

The cluster: one node with this host's CPUs, cons_tres, proctrack/linuxproc, task/none, no
accounting (no slurmdbd, as on sites that run without one), partitions ``cpu`` (default) and
``gpu`` on the same node without GPUs. MinJobAge 3600 s keeps finished jobs visible to
``squeue``/``scontrol`` for the whole test.

One SLURM run (``workflow/profiles/slurm-small`` as shipped, config/demo.yaml plus
``gpus_per_job: 0``, a shorter training and one dataset with a corrupt corpus, --keep-going)
builds the head norms, BM25 retrieval and one train -> encode -> retrieve -> evaluate chain,
and the broken dataset's BM25 target. At the same time a local run builds the norms and BM25
targets. Then:

* every job went through sbatch: one SLURM job id per planned job in Snakemake's log, a
  ``.snakemake/slurm_logs/.../<jobid>.log`` for each; only the declared local rules (settings
  records and the training verdict, seconds of host work) ran on the submit host;
* slurmctld saw each job on the partition the profile gives its rule (train and encode on
  ``gpu``), without any GPU request, COMPLETED, except the broken one: FAILED;
* Snakemake reported the broken job as a failed SLURM job and kept its log, which says why;
* the norms and BM25 outputs equal the local run's; the chain's metrics are finite.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from support.workflow import copy_workflow

pytestmark = pytest.mark.skipif(
    os.environ.get("SPLADE_RESCALE_SLURM_TEST") != "1",
    reason="real SLURM cluster test: run `make test-slurm` (root, Debian; installs slurm-wlm and munge)",
)

PROFILE = "workflow/profiles/slurm-small"
DATASET = "dl19-pool"  # the demo's DL19 queries over its shared 719-passage MS MARCO corpus
BACKBONE, VARIANT = "minilm", "baseline"
NORMS = f"results/demo/norms/{BACKBONE}.json"
BM25 = f"results/demo/metrics/bm25/{DATASET}.json"
CHAIN = f"results/demo/metrics/{BACKBONE}/{VARIANT}/{DATASET}.json"
BROKEN = "results/demo/metrics/bm25/broken.json"  # its corpus is not gzip: the first job reading it fails
SLURM_TIMEOUT = 900  # s; a few times what the run needs on 2 idle cores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else f"({path} missing)"


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to one daemon we started (by its pid), SIGKILL if it does not exit in 15 s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _node_line(hostname: str) -> tuple[str, int]:
    """This host as slurmd sees it (`slurmd -C`), RealMemory lowered by 10% (slurmd drains a
    node whose configured memory exceeds what it finds)."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if k != "SLURM_CONF"}).stdout
    line = next(x for x in out.splitlines() if x.startswith("NodeName="))
    memory = int(int(re.search(r"RealMemory=(\d+)", line).group(1)) * 0.9)
    line = re.sub(r"NodeName=\S+", f"NodeName={hostname} NodeAddr=127.0.0.1", line)
    return re.sub(r"RealMemory=\d+", f"RealMemory={memory}", line), memory


SLURM_CONF = Path("/etc/slurm/slurm.conf")
MARKER = "# one-node test cluster written by tests/workflow/test_slurm_cluster.py (removed after the test)"


def _slurm_conf(root: Path, hostname: str, node: str) -> str:
    return f"""\
{MARKER}
ClusterName=splade-test
SlurmctldHost={hostname}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=3600
ReturnToService=2
{node} State=UNKNOWN
PartitionName=cpu Nodes={hostname} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={hostname} MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """munged, slurmctld and slurmd in the foreground as our children; yields the env for clients."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: `make test-slurm` installs slurm-wlm and munge (apt-get)")
    if os.geteuid() != 0:
        pytest.fail("slurmd must run as root")
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o600)
    hostname = socket.gethostname().split(".")[0]
    node, memory = _node_line(hostname)
    needed = _profile_max_mem()
    if memory < needed:
        pytest.fail(f"this host offers {memory} MB to SLURM, {PROFILE} asks up to {needed} MB per job")
    if SLURM_CONF.exists() and MARKER not in SLURM_CONF.read_text():
        pytest.fail(f"{SLURM_CONF} exists (a real SLURM host?): this test would replace it; run it elsewhere")
    SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SLURM_CONF.write_text(_slurm_conf(root, hostname, node))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}

    daemons: list[subprocess.Popen] = []

    def start(name: str, *cmd: str) -> None:
        log = open(root / f"{name}.out", "w")
        daemons.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root))

    try:
        start("munged", "munged", "--foreground", "--force", f"--socket={root}/munge.socket",
              f"--key-file={key}", f"--log-file={root}/munged.log", f"--pid-file={root}/munged.pid",
              f"--seed-file={root}/munged.seed")
        _wait(lambda: (root / "munge.socket").exists(), 20, "munged socket", root / "munged.out")
        start("slurmctld", "slurmctld", "-D")
        start("slurmd", "slurmd", "-D")

        def idle() -> bool:
            for proc in daemons:
                if proc.poll() is not None:
                    pytest.fail(f"{proc.args[0]} exited ({proc.returncode}):\n"
                                f"{_tail(root / (proc.args[0] + '.out'))}")
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=env)
            return set(out.stdout.split()) == {"idle"}  # one line per partition

        _wait(idle, 60, "the node to be idle", root / "slurmctld.out")
        yield {"env": env, "root": root}
    finally:
        # Cancel what is left (e.g. after a timeout) so no slurmstepd outlives the test, then stop
        # the daemons by pid, slurmd first.
        if daemons:
            subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True)
            _wait(lambda: not subprocess.run(["squeue", "-h", "-t", "PD,R,CG", "-o", "%i"], env=env,
                                             capture_output=True, text=True).stdout.strip(),
                  30, "cancelled jobs to end", None, fail=False)
        for proc in reversed(daemons):
            _stop(proc)
        SLURM_CONF.unlink(missing_ok=True)


def _wait(check, timeout: float, what: str, log: Path | None, fail: bool = True) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    if fail:
        pytest.fail(f"timed out after {timeout} s waiting for {what}\n{_tail(log) if log else ''}")
    return False


def _profile() -> dict:
    return yaml.safe_load((REPO / PROFILE / "config.yaml").read_text())


def _profile_max_mem() -> int:
    profile = _profile()
    sizes = [profile["default-resources"]["mem_mb"]]
    sizes += [r["mem_mb"] for r in profile["set-resources"].values() if "mem_mb" in r]
    return max(sizes)


def _expected_partition(rule: str) -> str:
    profile = _profile()
    return profile["set-resources"].get(rule, {}).get("slurm_partition",
                                                        profile["default-resources"]["slurm_partition"])


def _copy_workflow(root: Path) -> Path:
    copy_workflow(root, resources=None)
    config = yaml.safe_load((root / "config/demo.yaml").read_text())
    config["gpus_per_job"] = 0  # the node has no GPUs: train/encode go to `gpu` without a GPU request
    # A short training: the chain proves scheduling, not model quality (same in both copies).
    config["training"]["overrides"] = {BACKBONE: {"steps": 4, "warmup_steps": 1, "flops_warmup_steps": 2,
                                                  "log_every": 2, "checkpoint_every": 4}}
    pool = "resources/demo/msmarco-dl19-dl20-demo"
    config["datasets"]["broken"] = {**config["datasets"][DATASET], "corpus": "resources/broken/corpus.jsonl.gz",
                                    "note": "deliberately broken: the corpus is not gzip"}
    assert config["datasets"]["broken"]["queries"].startswith(pool)
    (root / "resources/broken").mkdir()
    (root / "resources/broken/corpus.jsonl.gz").write_text("not gzip\n")
    (root / "config/slurm-test.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return root


def _snakemake(root: Path, env: dict, *args: str, timeout: float) -> subprocess.Popen:
    bin_dir = Path(sys.executable).parent  # splade-rescale, which every rule calls, lives beside python
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}
    log = open(root / "snakemake.out", "w")
    return subprocess.Popen([sys.executable, "-m", "snakemake", *args, "--configfile", "config/slurm-test.yaml"],
                            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def _scontrol(job_id: str, env: dict) -> dict:
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, env=env)
    assert out.returncode == 0, f"slurmctld no longer knows job {job_id}: {out.stderr}"
    return dict(re.findall(r"(\w+)=(\S*)", out.stdout))


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    """The SLURM run and, meanwhile, the local reference run; both must end within the timeout."""
    base = tmp_path_factory.mktemp("workflow")
    slurm_dir, local_dir = _copy_workflow(base / "slurm"), _copy_workflow(base / "local")
    t0 = time.monotonic()
    slurm = _snakemake(slurm_dir, cluster["env"], NORMS, BM25, CHAIN, BROKEN, "--workflow-profile", PROFILE,
                       "--keep-going", timeout=SLURM_TIMEOUT)
    local = _snakemake(local_dir, cluster["env"], NORMS, BM25, "--cores", "1", timeout=SLURM_TIMEOUT)
    try:
        local.wait(SLURM_TIMEOUT)
        slurm.wait(max(1, SLURM_TIMEOUT - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        for proc in (slurm, local):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # Snakemake cancels its SLURM jobs on SIGINT
                proc.wait(60)
        pytest.fail(f"timed out after {SLURM_TIMEOUT} s\n{_tail(slurm_dir / 'snakemake.out')}")
    seconds = time.monotonic() - t0
    print(f"\nSLURM run {seconds:.0f} s (rc {slurm.returncode}); local run rc {local.returncode}")
    assert local.returncode == 0, _tail(local_dir / "snakemake.out")
    out = (slurm_dir / "snakemake.out").read_text()
    return {"slurm": slurm_dir, "local": local_dir, "rc": slurm.returncode, "out": out, "env": cluster["env"]}


def _submissions(runs) -> list[tuple[str, str, Path]]:
    """(SLURM job id, rule, SLURM log) for each submission Snakemake logged."""
    found = re.findall(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+?)\)\.?$", runs["out"], re.M)
    return [(job_id, re.search(r"/rule_(\w+)/", log).group(1), Path(log)) for job_id, log in found]


def _declared_local_rules() -> set[str]:
    """The rules the workflow declares ``localrules:`` (seconds of host work, not worth a queue slot)."""
    text = "\n".join(p.read_text() for p in (REPO / "workflow").rglob("*.smk"))
    return set(re.findall(r"^localrules:\n\s+(\w+),", text, re.M))


def test_every_job_went_through_sbatch(runs):
    subs = _submissions(runs)
    started = re.findall(r"^rule (\w+):$", runs["out"], re.M)  # each job Snakemake started (retries: 0)
    on_host = re.findall(r"^localrule (\w+):$", runs["out"], re.M)
    finished = re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", runs["out"], re.M)
    assert sorted(started) == sorted(rule for _, rule, _ in subs), ("started jobs != SLURM submissions",
                                                                    started, subs)
    local_rules = _declared_local_rules()
    assert local_rules == {"settings", "judge_training", "data"}, local_rules
    # `data` is a target (every preparation step), which a run of `all` never starts as a job
    assert set(on_host) == local_rules - {"data"}, ("only the declared local rules run on the submit host", on_host)
    assert len(finished) == len(started) + len(on_host) - 1, "all but the broken job finish"  # dependants never start
    assert len({s[0] for s in subs}) == len(subs), "a SLURM job id seen twice"
    for job_id, rule, log in subs:
        assert log.is_file() and log.name == f"{job_id}.log", (rule, log)
        assert log.is_relative_to(runs["slurm"] / ".snakemake/slurm_logs"), log
    print("SLURM jobs: " + ", ".join(f"{j} {r}" for j, r, _ in subs))


def test_slurm_ran_each_job_on_its_partition_without_gpus(runs):
    jobs = {job_id: (rule, _scontrol(job_id, runs["env"])) for job_id, rule, _ in _submissions(runs)}
    for job_id, (rule, info) in jobs.items():
        assert info["Partition"] == _expected_partition(rule), (job_id, rule, info["Partition"])
        assert "gpu" not in (info.get("TresPerJob", "") + info.get("TresPerNode", "")), (job_id, rule, info)
        assert Path(info["WorkDir"]) == runs["slurm"], (job_id, info["WorkDir"])
    on_gpu = {rule for rule, info in jobs.values() if info["Partition"] == "gpu"}
    assert on_gpu, "no job on the gpu partition: the train -> encode chain did not run through SLURM"
    states = sorted(info["JobState"] for _, info in jobs.values())
    assert states.count("FAILED") == 1 and states.count("COMPLETED") == len(states) - 1, states
    print("partitions: " + ", ".join(f"{j} {r}@{i['Partition']}:{i['JobState']}" for j, (r, i) in jobs.items()))


def test_broken_job_is_reported_failed_with_its_log_kept(runs):
    assert runs["rc"] != 0, "Snakemake succeeded although one job cannot"
    errors = re.findall(r"^Error in rule (\w+):\n((?:[ \t]+.*\n)+)", runs["out"], re.M)
    assert len(errors) == 1, (errors, runs["out"][-4000:])
    rule, block = errors[0]
    assert "broken" in block, block  # the broken dataset's job, no other
    job_id = re.search(r"SLURM-job '(\d+)' failed, SLURM status is: 'FAILED'", block)
    assert job_id, block
    info = _scontrol(job_id.group(1), runs["env"])
    assert info["JobState"] == "FAILED" and info["ExitCode"] != "0:0", info
    log = runs["slurm"] / re.search(r"^\s+log: ([^,\s]+)", block, re.M).group(1)
    assert log.is_file(), f"the failed job's log was not kept: {log}"
    assert re.search(r"gzip|Not a gzipped file|invalid", log.read_text(), re.I), _tail(log)
    slurm_logs = list((runs["slurm"] / ".snakemake/slurm_logs").rglob(f"{job_id.group(1)}.log"))
    assert len(slurm_logs) == 1, slurm_logs
    # the others went on (--keep-going) and finished
    for target in (NORMS, BM25, CHAIN):
        assert (runs["slurm"] / target).is_file(), target
    assert not (runs["slurm"] / BROKEN).exists()
    print(f"failed: rule {rule}, SLURM job {job_id.group(1)} FAILED, log {log.relative_to(runs['slurm'])}")


def _assert_same(slurm, local, path="") -> None:
    """Equal JSON values; floats to 1e-9 relative (the same code and CPU on both sides)."""
    if isinstance(local, dict):
        assert set(slurm) == set(local), (path, set(slurm) ^ set(local))
        for key in local:
            _assert_same(slurm[key], local[key], f"{path}.{key}")
    elif isinstance(local, list):
        assert len(slurm) == len(local), path
        for i, (a, b) in enumerate(zip(slurm, local)):
            _assert_same(a, b, f"{path}[{i}]")
    elif isinstance(local, float):
        assert math.isclose(slurm, local, rel_tol=1e-9, abs_tol=1e-12), (path, slurm, local)
    else:
        assert slurm == local, (path, slurm, local)


def test_outputs_equal_the_local_run(runs):
    slurm_norms = json.loads((runs["slurm"] / NORMS).read_text())
    local_norms = json.loads((runs["local"] / NORMS).read_text())
    _assert_same(slurm_norms, local_norms)
    assert slurm_norms["decoder_frobenius_norm"] > 0
    slurm_bm25 = json.loads((runs["slurm"] / BM25).read_text())
    local_bm25 = json.loads((runs["local"] / BM25).read_text())
    for key in ("metrics", "per_query", "n_queries_evaluated"):  # not "efficiency": QPS is a timing
        _assert_same(slurm_bm25[key], local_bm25[key], key)
    assert slurm_bm25["metrics"]["nDCG@10"] > 0
    run = slurm_bm25["run"]  # the run file the metrics were computed from
    assert (runs["slurm"] / run).read_bytes() == (runs["local"] / run).read_bytes(), run


def test_chain_trained_encoded_and_retrieved(runs):
    metrics = json.loads((runs["slurm"] / CHAIN).read_text())
    assert metrics["status"] == "ok", metrics.get("status")
    assert metrics["metrics"] and all(math.isfinite(v) for v in metrics["metrics"].values()), metrics["metrics"]
