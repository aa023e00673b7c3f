"""End to end: the real offline demo workflow in a copy of the repository (6-8 minutes alone on 2
cores, 8-10 beside the other tests).

One session-scoped run of ``snakemake all --cores 2 --configfile config/demo.yaml`` in a
temporary copy (Snakefile, workflow/, config/, resources/), shared by every test here:

* every output the paper's tables and figures need exists, for each backbone x variant x
  dataset and for BM25;
* a second ``snakemake all -n`` has nothing to do (no output is taken as stale);
* changing one backbone's settings reruns only that backbone's chain (+ the tables/figures
  and the norms table), nothing of the other backbone or of BM25;
* a deleted run file, asked for again, reruns only what is downstream of it (retrieve ->
  evaluate -> summary -> tables/figures), not the encoding, indexing or training before it;
* ``snakemake --report`` builds.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from support.workflow import copy_workflow, job_counts, snakemake

pytestmark = pytest.mark.slow

DEMO_CONFIG = "config/demo.yaml"


def planned_jobs(output: str) -> list[dict]:
    """Each job block of a dry run: {"rule", "output": [paths], "wildcards": {name: value}}."""
    jobs = []
    for m in re.finditer(r"^(?:local)?rule (\w+):\n((?:[ \t]+.*\n?)*)", output, re.M):
        fields = dict(re.findall(r"^\s+(\w+): (.*)$", m.group(2), re.M))
        wildcards = dict(kv.split("=", 1) for kv in fields["wildcards"].split(", ")) if "wildcards" in fields else {}
        jobs.append({"rule": m.group(1), "output": fields.get("output", "").split(", "), "wildcards": wildcards})
    return jobs


def job_keys(jobs: list[dict]) -> Counter:
    return Counter((j["rule"], tuple(sorted(j["wildcards"].items()))) for j in jobs)


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finished demo in a temporary copy of the workflow (run once per test session)."""
    root = copy_workflow(tmp_path_factory.mktemp("demo-workflow"), resources=None)
    plan = snakemake("all", "-n", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=root)
    assert plan.returncode == 0, plan.stderr[-3000:]
    (root / "plan.txt").write_text(plan.stdout + plan.stderr)  # the whole DAG, for the rerun tests
    t0 = time.monotonic()
    proc = snakemake("all", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=root, timeout=3600)
    if proc.returncode != 0:
        logs = "".join(f"\n--- {p}\n{p.read_text()[-1500:]}" for p in sorted((root / "results/logs").rglob("*.log"))
                       if "error" in p.read_text().lower())
        pytest.fail(f"demo workflow failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}{logs[-6000:]}")
    print(f"demo workflow: {time.monotonic() - t0:.0f} s")
    return root


@pytest.fixture(scope="session")
def full_plan(demo: Path) -> list[dict]:
    return planned_jobs((demo / "plan.txt").read_text())


@pytest.fixture(scope="session")
def demo_config(demo: Path) -> dict:
    with open(demo / DEMO_CONFIG) as f:
        return yaml.safe_load(f)


def test_every_expected_output_exists(demo: Path, demo_config: dict) -> None:
    import json

    from splade_rescale.report.figures import FORMATS as FIGURE_FORMATS
    from splade_rescale.report.figures import figure_names
    from splade_rescale.report.tables import FORMATS as TABLE_FORMATS
    from splade_rescale.report.tables import table_names

    res = demo / "results"
    backbones, variants, datasets = (list(demo_config[k]) for k in ("backbones", "variants", "datasets"))
    expected = [res / "tables/norms.md", res / "tables/norms.csv"]
    for b in backbones:
        expected += [res / f"backbones/{b}/manifest.json", res / f"backbones/{b}/model/config.json",
                     res / f"norms/{b}.json", res / f"summary/{b}.json"]
        for v in variants:
            expected += [res / f"norms/{b}/{v}.json", res / f"models/{b}/{v}/manifest.json",
                         res / f"models/{b}/{v}/train_log.csv", res / f"models/{b}/{v}/final/config.json"]
            expected += [res / f"{kind}/{b}/{v}/{d}.{ext}" for d in datasets
                         for kind, ext in (("runs", "trec"), ("metrics", "json"))]
    expected += [res / f"{kind}/bm25/{d}.{ext}" for d in datasets
                 for kind, ext in (("runs", "trec"), ("metrics", "json"))]
    expected += [res / f"tables/{t}.{ext}" for t in table_names(demo_config) for ext in TABLE_FORMATS]
    expected += [res / f"figures/{f}.{ext}" for f in figure_names(demo_config) for ext in FIGURE_FORMATS]
    assert {"md", "csv", "tex"} <= set(TABLE_FORMATS) and {"png", "pdf"} <= set(FIGURE_FORMATS)
    missing = [str(p.relative_to(demo)) for p in expected if not p.is_file() or p.stat().st_size == 0]
    assert missing == []

    for b in backbones:
        for v in variants:
            manifest = json.loads((res / f"models/{b}/{v}/manifest.json").read_text())
            # 24 steps do not show the paper's effect (the miniature does): every demo run is healthy,
            # none near-empty or near-dense under the collapse floors
            assert manifest["status"] == "ok", (b, v, manifest["reason"])
            for d in datasets:
                metrics = json.loads((res / f"metrics/{b}/{v}/{d}.json").read_text())
                assert metrics["metrics"] and metrics["n_queries_in_qrels"] > 0, (b, v, d)
    for d in datasets:
        assert json.loads((res / f"metrics/bm25/{d}.json").read_text())["metrics"], d
    # no temporaries of interrupted writes left anywhere in results/
    assert [str(p) for p in res.rglob(".*.tmp")] == []


def test_rerun_has_nothing_to_do(demo: Path) -> None:
    proc = snakemake("all", "-n", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=demo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert "Job stats:" not in proc.stdout


def test_runtime_settings_rerun_nothing(demo: Path) -> None:
    """Batch size, device, shard size, size budgets and Lucene threads change how fast a job runs,
    not what it writes: after a finished demo, editing them plans no job (no encode, index, retrieve)."""
    with open(demo / DEMO_CONFIG) as f:
        config = yaml.safe_load(f)
    config["device"] = "cpu"
    config["encoding"].update(batch_size=7, shard_size=1234, index_budget_gb=55, model_budget_gb=66)
    config["retrieval"]["threads"] = 2
    changed = demo / "config/demo-runtime.yaml"
    changed.write_text(yaml.safe_dump(config))
    proc = snakemake("all", "-n", "--cores", "2", "--configfile", str(changed), cwd=demo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr, planned_jobs(proc.stdout)


def test_changing_one_backbone_reruns_only_its_chain(demo: Path, full_plan: list[dict]) -> None:
    text = (demo / DEMO_CONFIG).read_text()
    assert text.count("inflate_head: 16") == 1
    changed = demo / "config/demo-x8.yaml"
    changed.write_text(text.replace("inflate_head: 16", "inflate_head: 8"))
    proc = snakemake("all", "-n", "--cores", "2", "--configfile", str(changed), cwd=demo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = planned_jobs(proc.stdout + proc.stderr)
    # exactly minilm-x16's whole chain (fetch -> norms -> rescale -> train -> encode -> index ->
    # retrieve -> evaluate -> summary) and the aggregates that read it; nothing of minilm or BM25
    chain = [j for j in full_plan if j["wildcards"].get("backbone") == "minilm-x16"]
    aggregates = [j for j in full_plan if j["rule"] in ("norms_table", "tables", "figures", "all")]
    assert len(chain) > 10 and len(aggregates) == 4
    assert job_keys(jobs) == job_keys(chain + aggregates)
    assert job_counts(proc.stdout)["total"] == len(jobs)
    assert not any(p.startswith(("results/runs/bm25", "results/metrics/bm25", "results/training"))
                   or "/minilm/" in p for j in jobs for p in j["output"])


def test_deleting_one_run_reruns_only_what_follows(demo: Path, tmp_path: Path) -> None:
    """A deleted intermediate is not silently regenerated by `all` (Snakemake leaves a missing file
    alone while everything that reads it is up to date); asked for, it reruns with exactly what
    depends on it: retrieve -> evaluate -> the backbone's summary -> tables and figures."""
    target = "results/runs/minilm/baseline/scifact.trec"
    run = demo / target
    aside = tmp_path / "scifact.trec"
    os.replace(run, aside)  # keeps its mtime for the restore
    try:
        untouched = snakemake("all", "-n", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=demo)
        proc = snakemake("all", target, "-n", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=demo)
    finally:
        os.replace(aside, run)
    assert untouched.returncode == 0 and "Nothing to be done" in untouched.stdout + untouched.stderr
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = planned_jobs(proc.stdout + proc.stderr)
    outputs = {p for j in jobs for p in j["output"] if p}
    assert {target, "results/metrics/minilm/baseline/scifact.json", "results/summary/minilm.json"} <= outputs
    assert {j["rule"] for j in jobs} >= {"tables", "figures", "all"} and len(jobs) == 6
    assert job_counts(proc.stdout) == {**Counter(j["rule"] for j in jobs), "total": len(jobs)}
    upstream = ("results/encoded/", "results/indexes/", "results/models/", "results/backbones/", "results/norms/",
                "results/training/")
    assert not [p for p in outputs if p.startswith(upstream)]  # no encode, index, train, ... job
    assert all(j["wildcards"] in ({}, {"backbone": "minilm"},
                                  {"backbone": "minilm", "variant": "baseline", "dataset": "scifact"}) for j in jobs)


def test_report_builds(demo: Path) -> None:
    report = demo / "results/report.html"
    proc = snakemake("--report", str(report.relative_to(demo)), "--configfile", DEMO_CONFIG, cwd=demo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report.is_file() and report.stat().st_size > 10_000
