"""The schedule of a GPU run: Lucene jobs leave a GPU job's cores free, and the plan reports GPU idle time."""

from __future__ import annotations

import pytest
import yaml

from conftest import REPO
from splade_rescale.config import ConfigError, check_cores
from splade_rescale.costs.schedule import Job, gpu_usage, list_schedule, schedule_config
from support.workflow import snakemake


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


def test_cores_check_refuses_lucene_on_every_core_and_names_the_fix():
    check_cores(_config(12), 16)
    with pytest.raises(ConfigError, match=r"retrieval.threads = 16 with --cores 16 .*retrieval.threads <= 12"):
        check_cores(_config(16), 16)
    with pytest.raises(ConfigError, match=r"--cores >= 20"):
        check_cores(_config(16), 8)  # threads capped at 8: still every core


def test_workflow_with_gpus_refuses_lucene_on_every_core(tmp_path):
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["retrieval"]["threads"] = 16
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = snakemake("all", "-n", "--cores", "16", "--resources", "gpu=1", "--configfile", str(bad))
    assert proc.returncode != 0
    message = proc.stdout + proc.stderr
    assert "retrieval.threads = 16 with --cores 16" in message and "fix:" in message
    ok = snakemake("all", "-n", "--cores", "16", "--resources", "gpu=1", "--quiet", "rules")
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_paper_plan_keeps_the_gpu_busy_at_sixteen_cores(tmp_path):
    after, text = schedule_config(REPO / "config/config.yaml", None, cores=16, root=REPO)
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["retrieval"]["threads"] = 16
    (tmp_path / "before.yaml").write_text(yaml.safe_dump(config))
    before, warned = schedule_config(tmp_path / "before.yaml", None, cores=16, root=REPO)
    waiting = lambda s: s["gpu_idle_h"] - s["gpu_idle_before_first_h"] - s["gpu_idle_after_last_h"]  # noqa: E731
    assert waiting(after) < 0.02 * after["gpu_busy_h"]  # the GPU waits only at the start and the end
    assert waiting(before) > 0.2 * before["gpu_busy_h"] and before["wall_h"] > after["wall_h"]
    assert "GPU busy" in text and "Warning" not in text and "refuses this run" in warned
