"""The schedule of a GPU run: Lucene jobs leave a GPU job's cores free, and the plan reports GPU idle time."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from splade_rescale.config import local_threads, visible_gpus
from splade_rescale.costs.model_shapes import gpu_job_priorities
from splade_rescale.costs.schedule import Job, gpu_usage, list_schedule, schedule_config
from splade_rescale.gpus import CPU_TORCH_VAR
from support.workflow import WITH_BIN, snakemake


def _pipeline(lucene_threads: int) -> list[Job]:
    """Two models: encode (GPU, 4 threads) -> index (Lucene); the second encode is ready at once."""
    return [Job(1, "encode_corpus", 4, 10.0, (), 1), Job(2, "impact_index", lucene_threads, 100.0, (1,)),
            Job(3, "encode_corpus", 4, 10.0, (), 1), Job(4, "impact_index", lucene_threads, 100.0, (3,)),
            Job(5, "train", 4, 50.0, (), 1)]


def test_a_lucene_job_on_every_core_makes_the_gpu_wait():
    jobs = _pipeline(16)
    slots = list_schedule(jobs, cores=16, gpus=1)
    # an index takes all 16 cores: nothing starts beside it, so training waits for the first index to end
    first_index = min((slots[2], slots[4]), key=lambda s: s.start)
    assert slots[5].start >= first_index.end
    usage = gpu_usage(jobs, slots, 1)
    assert usage["gpu_busy_h"] == pytest.approx(70 / 3600)
    assert usage["gpu_idle_h"] * 3600 > 100


def test_twelve_lucene_threads_keep_the_gpu_working():
    jobs = _pipeline(12)
    slots = list_schedule(jobs, cores=16, gpus=1)
    gpu = sorted((s.start, s.end) for j, s in slots.items() if jobs[j - 1].gpus)
    # the three GPU jobs run back to back from t = 0, beside the indexes
    assert gpu[0][0] == 0 and all(a[1] == pytest.approx(b[0]) for a, b in zip(gpu, gpu[1:]))
    usage = gpu_usage(jobs, slots, 1)
    assert usage["gpu_idle_h"] == pytest.approx(usage["gpu_idle_after_last_h"])


def test_the_gpu_resource_runs_one_gpu_job_at_a_time():
    jobs = [Job(i, "encode_corpus", 1, 5.0, (), 1) for i in range(1, 5)]
    slots = list_schedule(jobs, cores=16, gpus=1)
    assert max(s.end for s in slots.values()) == pytest.approx(20.0)
    assert max(s.end for s in list_schedule(jobs, cores=16, gpus=2).values()) == pytest.approx(10.0)


def _config(lucene: int, encode: int = 4, train: int = 4) -> dict:
    return {"retrieval": {"threads": lucene}, "encoding": {"threads": encode}, "training": {"threads": train}}


def test_threads_follow_the_cores_so_that_lucene_leaves_the_gpu_jobs_theirs():
    # 16 cores, 1 GPU: a quarter (4) stays the GPU job's, 12 for Lucene: the configured figures
    assert local_threads(_config(12), 16, 1) == {"train": 4, "encode": 4, "lucene": 12}
    # 8 cores: 8 // 4 = 2 for the GPU job, 8 - 2 = 6 for each index or search (12 asked)
    assert local_threads(_config(12), 8, 1) == {"train": 2, "encode": 2, "lucene": 6}
    # 16 cores, 2 GPU jobs at once: 16 // 8 = 2 each, 16 - 2 x 2 = 12
    assert local_threads(_config(16), 16, 2) == {"train": 2, "encode": 2, "lucene": 12}
    # 2 cores: one each, never zero; a 1-thread training stays 1
    assert local_threads(_config(12, train=1), 2, 1) == {"train": 1, "encode": 1, "lucene": 1}
    # no GPU jobs (model jobs on the CPU): the configured threads stand
    assert local_threads(_config(12), 8, 0) == {"train": 4, "encode": 4, "lucene": 12}


def test_visible_gpus_without_torch(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert visible_gpus({}, tmp_path) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3"}, tmp_path) == 1
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, tmp_path) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, tmp_path) == 0
    assert visible_gpus({}, tmp_path / "none") == 0


def test_smaller_models_train_and_encode_first_above_every_cpu_job():
    priorities = gpu_job_priorities({
        "ettin-1b": {"source": "hf", "repo_id": "jhu-clsp/ettin-encoder-1b"},
        "ettin-17m": {"source": "hf", "repo_id": "jhu-clsp/ettin-encoder-17m"},
        "bert": {"source": "hf", "repo_id": "google-bert/bert-base-uncased"},
        "splade": {"source": "hf", "repo_id": "naver/splade-cocondenser-ensembledistil"},
        "mine": {"source": "local", "path": "models/mine"}})
    # 17m < bert = splade (109.5M) < 1b < unknown (ranked largest)
    assert priorities == {"ettin-17m": 5, "bert": 3, "splade": 3, "ettin-1b": 2, "mine": 1}


def _paper_dry_run(*args: str, gpus_seen: str) -> tuple[str, list[dict]]:
    env = {**WITH_BIN, "CUDA_VISIBLE_DEVICES": gpus_seen, CPU_TORCH_VAR: "1"}  # the GPUs seen are ids only
    proc = snakemake("all", "-n", "--forceall", "--configfile", "config/config.yaml", *args, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", proc.stdout):
        head = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if head:
            fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
            jobs.append({"rule": head.group(1), "threads": int(fields.get("threads", 1)),
                         "gpu": "gpu=" in fields.get("resources", ""), "priority": int(fields.get("priority", 0))})
    return proc.stdout + proc.stderr, jobs


def test_the_paper_command_on_eight_cores_runs_one_gpu_job_at_a_time_beside_lucene():
    # `snakemake --cores 8 all` with no flag, on a machine that shows one GPU
    log, jobs = _paper_dry_run("--cores", "8", gpus_seen="0")
    assert "GPU jobs: at most 1 at once (gpu=1)" in log
    gpu = [j for j in jobs if j["gpu"]]
    lucene = [j for j in jobs if j["rule"] in ("impact_index", "impact_retrieve", "bm25_index", "bm25_retrieve")]
    assert {j["rule"] for j in gpu} == {"train", "encode_corpus", "encode_queries"} and lucene
    assert max(j["threads"] for j in lucene) + max(j["threads"] for j in gpu) <= 8
    assert min(j["priority"] for j in gpu) > max(j["priority"] for j in jobs if not j["gpu"])
    # a limit given on the command line stands; no GPU seen: no limit, the model jobs run on the CPU
    assert "at most 2 at once (gpu=2)" in _paper_dry_run("--cores", "16", "--resources", "gpu=2", gpus_seen="0,1,2")[0]
    log, jobs = _paper_dry_run("--cores", "8", gpus_seen="")
    assert "GPU jobs:" not in log
    assert max(j["threads"] for j in jobs if j["rule"] == "impact_index") == 8  # 12 asked, capped at the cores


def test_paper_plan_keeps_the_gpu_busy_on_eight_and_sixteen_cores():
    eight, text = schedule_config(REPO / "config/config.yaml", None, cores=8, root=REPO)
    sixteen, _ = schedule_config(REPO / "config/config.yaml", None, cores=16, root=REPO)
    assert eight["threads"] == {"train": 2, "encode": 2, "lucene": 6}
    assert eight["gpu_idle_h"] <= 0.10 * eight["wall_h"]
    assert sixteen["gpu_idle_h"] <= eight["gpu_idle_h"] and sixteen["wall_h"] <= eight["wall_h"]
    assert eight["gpu_busy_h"] == pytest.approx(sixteen["gpu_busy_h"])
    assert "GPU busy" in text and "each index or search 6" in text
