"""End to end: the real offline demo workflow in a copy of the repository (the suite's longest module:
minutes on 2 cores; docs/measurements.md).

One session-scoped run of ``snakemake all --cores 2 --configfile config/demo.yaml`` in a
temporary copy (Snakefile, workflow/, config/, resources/), shared by every test here (one module,
so that pytest-xdist runs it once, on one worker):

* every output the paper's tables and figures need exists under results/demo/, for each
  backbone x variant x dataset and for BM25;
* a second ``snakemake all -n`` has nothing to do (no output is taken as stale);
* the rerun matrix: after one edit each (a config key, a recipe value, a data file in place, a new
  dataset or variant, another experiment), a dry run plans exactly the jobs that edit changes;
* a deleted run file, asked for again, reruns only what is downstream of it (retrieve ->
  evaluate -> summary -> tables/figures), not the encoding, indexing or training before it;
* ``snakemake --report`` builds.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from conftest import REPO
from support.trec_eval import assert_metrics_match_trec_eval
from support.workflow import copy_workflow, job_counts, planned_jobs, snakemake

pytestmark = pytest.mark.slow

DEMO_CONFIG = "config/demo.yaml"
RESULTS = "results/demo"
RECIPES = "config/recipes.yaml"
POOL = "resources/demo/msmarco-dl19-dl20-demo"
TRAIN_QRELS = "resources/demo/scifact/qrels/train.tsv"


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finished demo in a temporary copy of the workflow (run once per test session)."""
    root = copy_workflow(tmp_path_factory.mktemp("demo-workflow"), resources=None)
    plan = snakemake("all", "-n", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=root)
    assert plan.returncode == 0, plan.stderr[-3000:]
    t0 = time.monotonic()
    proc = snakemake("all", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=root, timeout=3600)
    if proc.returncode != 0:
        logs = "".join(f"\n--- {p}\n{p.read_text()[-1500:]}" for p in sorted((root / RESULTS / "logs").rglob("*.log"))
                       if "error" in p.read_text().lower())
        pytest.fail(f"demo workflow failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}{logs[-6000:]}")
    print(f"demo workflow: {time.monotonic() - t0:.0f} s")
    return root


@pytest.fixture(scope="session")
def demo_config(demo: Path) -> dict:
    with open(demo / DEMO_CONFIG) as f:
        return yaml.safe_load(f)


def test_every_expected_output_exists(demo: Path, demo_config: dict) -> None:
    from splade_rescale.report.figures import FORMATS as FIGURE_FORMATS
    from splade_rescale.report.figures import figure_names
    from splade_rescale.report.tables import FORMATS as TABLE_FORMATS
    from splade_rescale.report.tables import table_names

    res = demo / RESULTS
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
    for p in demo_config["published_models"]:  # untrained: fetched, then the same chain
        expected += [res / f"models/{p}/published/manifest.json", res / f"models/{p}/published/final/config.json"]
        expected += [res / f"{kind}/{p}/published/{d}.{ext}" for d in datasets
                     for kind, ext in (("runs", "trec"), ("metrics", "json"))]
    expected += [res / f"tables/{t}.{ext}" for t in table_names(demo_config) for ext in TABLE_FORMATS]
    expected += [res / f"figures/{f}.{ext}" for f in figure_names(demo_config) for ext in FIGURE_FORMATS]
    assert {"md", "csv", "tex"} <= set(TABLE_FORMATS) and {"png", "pdf"} <= set(FIGURE_FORMATS)
    missing = [str(p.relative_to(demo)) for p in expected if not p.is_file()]
    assert missing == []

    skipped_runs = []
    for b in backbones:
        for v in variants:
            manifest = json.loads((res / f"models/{b}/{v}/manifest.json").read_text())
            for d in datasets:
                metrics = json.loads((res / f"metrics/{b}/{v}/{d}.json").read_text())
                if manifest["status"] == "ok":
                    assert metrics["metrics"] and metrics["n_queries_in_qrels"] > 0, (b, v, d)
                else:  # a collapsed run is a result: its tables say so, nothing is encoded or retrieved
                    assert metrics["status"] == "collapsed" and not metrics["metrics"], (b, v, d)
                    skipped_runs.append(res / f"runs/{b}/{v}/{d}.trec")
    assert [str(p.relative_to(demo)) for p in skipped_runs if p.stat().st_size] == []
    empty = [str(p.relative_to(demo)) for p in expected if p not in skipped_runs and p.stat().st_size == 0]
    assert empty == []
    for d in datasets:
        assert json.loads((res / f"metrics/bm25/{d}.json").read_text())["metrics"], d
        for p in demo_config["published_models"]:
            metrics = json.loads((res / f"metrics/{p}/published/{d}.json").read_text())
            assert metrics["status"] == "ok" and metrics["metrics"], (p, d)
    # no temporaries of interrupted writes left anywhere in results/
    assert [str(p) for p in res.rglob(".*.tmp")] == []


def test_every_run_is_as_expected(demo: Path) -> None:
    """The ×16 stand-in's baseline collapses, its rescaled twin and MiniLM's runs work, with the scores
    of config/expected/demo.yaml (shown in README.md and docs/demo.md) within its tolerance."""
    from splade_rescale.report.expected import check, load_expected

    expected = load_expected(REPO / "config/expected/demo.yaml")
    for runs in expected["runs"].values():  # in either training precision: the collapse and the recovery
        assert runs["minilm-x16/baseline"]["status"] == "collapsed" and runs["minilm-x16/rescaled"]["status"] == "ok"
    assert check(expected, demo / RESULTS) == []


def test_every_metrics_file_equals_trec_eval_on_its_run(demo: Path) -> None:
    """trec_eval (pytrec_eval) on each run file and the qrels written beside its metrics gives our numbers."""
    res = demo / RESULTS
    files = sorted(res.glob("metrics/**/*.json"))
    assert len(files) == 18  # 4 trained models, the published one and BM25 x 3 datasets
    checked = 0
    for metrics in files:
        run = res / "runs" / metrics.relative_to(res / "metrics").with_suffix(".trec")
        if json.loads(metrics.read_text())["status"] == "collapsed":  # no run to score (expected-outputs test)
            continue
        assert_metrics_match_trec_eval(metrics, run, metrics.with_suffix(".qrels"))
        checked += 1
    assert checked >= 15  # at most the ×16 stand-in's baseline collapses (config/expected/demo.yaml)


def test_rerun_has_nothing_to_do(demo: Path) -> None:
    proc = snakemake("all", "-n", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=demo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert "Job stats:" not in proc.stdout


def test_anserini_reference_index_encodes_nothing_again(demo: Path) -> None:
    """Anserini's index of a finished corpus, asked for as the docs say, plans no encode (the shards,
    temporary, are gone: rebuilding the impact index itself would encode the corpus again) and agrees
    with the direct index."""
    corpus = "minilm/rescaled/msmarco-dl19-dl20-demo"
    target = f"{RESULTS}/reference_indexes/{corpus}.json"
    assert not (demo / RESULTS / "encoded" / "minilm/rescaled/corpora/msmarco-dl19-dl20-demo").exists()
    plan = snakemake(target, "-n", "--cores", "2", "--configfile", DEMO_CONFIG, cwd=demo)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert job_counts(plan.stdout) == {"anserini_reference_index": 1, "total": 1}
    proc = snakemake(target, "--cores", "2", "--configfile", DEMO_CONFIG, cwd=demo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = json.loads((demo / target).read_text())
    assert check["same_summary"] and check["n_docs"] == check["anserini"]["n_docs"] > 700


def test_deleting_one_run_reruns_only_what_follows(demo: Path, tmp_path: Path) -> None:
    """A deleted intermediate is not silently regenerated by `all` (Snakemake leaves a missing file
    alone while everything that reads it is up to date); asked for, it reruns with exactly what
    depends on it: retrieve -> evaluate -> the backbone's summary -> tables and figures."""
    target = f"{RESULTS}/runs/minilm/baseline/scifact.trec"
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
    assert {target, f"{RESULTS}/metrics/minilm/baseline/scifact.json", f"{RESULTS}/summary/minilm.json"} <= outputs
    assert {j["rule"] for j in jobs} >= {"tables", "figures", "all"} and len(jobs) == 6
    assert job_counts(proc.stdout) == {**Counter(j["rule"] for j in jobs), "total": len(jobs)}
    upstream = tuple(f"{RESULTS}/{folder}/" for folder in ("encoded", "indexes", "models", "backbones", "norms",
                                                           "training"))
    assert not [p for p in outputs if p.startswith(upstream)]  # no encode, index, train, ... job
    assert all(j["wildcards"] in ({}, {"backbone": "minilm"},
                                  {"backbone": "minilm", "run": "baseline", "dataset": "scifact"}) for j in jobs)


def test_report_builds(demo: Path) -> None:
    report = demo / RESULTS / "report.html"
    proc = snakemake("--report", str(report.relative_to(demo)), "--configfile", DEMO_CONFIG, cwd=demo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report.is_file() and report.stat().st_size > 10_000


# ---------------------------------------------------------------------------- the rerun matrix

# Aggregates that follow any change of a metric or a training record (`all` is the target itself).
REPORTS = {"backbone_summary": 2, "tables": 1, "figures": 1, "all": 1}
ONE_BACKBONE_REPORTS = {"backbone_summary": 1, "tables": 1, "figures": 1, "all": 1}
NOTHING: dict[str, int] = {}


@dataclass
class Edit:
    """One row: what is edited, and the jobs per rule a dry run then plans."""

    name: str
    expected: dict[str, int]
    config: Callable[[dict], None] | None = None   # edits a copy of the demo config
    files: Callable[[Path], None] | None = None    # edits files of the workflow folder in place
    touches: tuple[str, ...] = ()                  # the files ``files`` edits (restored after the row)
    planned: Callable[[list[dict]], None] | None = None  # a further check on the planned jobs
    configfile: str | None = None                  # another whole config instead of an edited demo one


def _recipe(key: str, value) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / RECIPES
        text = path.read_text()
        block = text.index("  demo-cpu:")
        head, rest = text[:block], text[block:]
        new, n = re.subn(rf"^(    {key}: ).*$", rf"\g<1>{value}", rest, count=1, flags=re.M)
        assert n == 1, key
        path.write_text(head + new)
    return edit


def _typo_in_source(root: Path) -> None:
    path = root / RECIPES
    text = path.read_text()
    assert "sized for the offline demo" in text
    path.write_text(text.replace("sized for the offline demo", "sized for teh offline demo", 1))


def _drop_qrels_line(root: Path) -> None:
    """One judgment of DL19 removed: a query with several judged passages keeps the judged query set."""
    path = root / POOL / "qrels.dl19.txt"
    lines = path.read_text().splitlines(keepends=True)
    counts: dict[str, int] = {}
    for line in lines:
        counts[line.split()[0]] = counts.get(line.split()[0], 0) + 1
    drop = next(i for i, line in enumerate(lines) if counts[line.split()[0]] > 1)
    path.write_text("".join(lines[:drop] + lines[drop + 1:]))


def _drop_train_qrels_line(root: Path) -> None:
    """One judgment of SciFact's train split removed: the training data, read by the BM25 mining."""
    path = root / TRAIN_QRELS
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:1] + lines[2:]))  # the header kept


def _edit_pool_passage(root: Path) -> None:
    """One passage of the DL19/DL20 pool corpus reworded (ids unchanged)."""
    path = root / POOL / "corpus.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    key = "contents" if "contents" in docs[0] else "text"
    docs[0][key] = "an edited passage about aziz hashim and the river " + docs[0][key]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)


def _edit_dl20_query(root: Path) -> None:
    path = root / POOL / "queries.dl20.tsv"
    lines = path.read_text().splitlines(keepends=True)
    qid, text = lines[0].rstrip("\n").split("\t", 1)
    path.write_text("".join([f"{qid}\t{text} exactly\n", *lines[1:]]))


def _runtime(config: dict) -> None:
    config["device"] = "cpu"
    config["encoding"].update(batch_size=7, shard_size=1234, index_budget_gb=55, model_budget_gb=66, threads=2)
    config["retrieval"].update(threads=2, impact_indexer="anserini")  # the same postings: nothing reruns
    config["training"]["threads"] = 2


def _new_scifact_subset(config: dict) -> None:
    config["datasets"]["scifact-b"] = {**config["datasets"]["scifact"],
                                       "subset": {**config["datasets"]["scifact"]["subset"], "seed": 1}}


def _only_dataset(name: str) -> Callable[[list[dict]], None]:
    def check(jobs: list[dict]) -> None:
        searched = {j["wildcards"]["dataset"] for j in jobs if j["rule"] in ("impact_retrieve", "bm25_retrieve")}
        assert searched == {name}, searched
    return check


def _only_variant(name: str) -> Callable[[list[dict]], None]:
    def check(jobs: list[dict]) -> None:
        # a variant's norms and init ({variant}) and its one-seed run ({run}: the variant's name)
        variants = {w.get("variant") or w["run"] for w in (j["wildcards"] for j in jobs) if {"variant", "run"} & set(w)}
        assert variants == {name}, variants
    return check


def _only_backbone(name: str) -> Callable[[list[dict]], None]:
    def check(jobs: list[dict]) -> None:
        backbones = {j["wildcards"]["backbone"] for j in jobs if "backbone" in j["wildcards"]}
        assert backbones == {name}, backbones
    return check


def _only_model_chain(backbone: str, run: str) -> Callable[[list[dict]], None]:
    """Every encode, index, search and evaluation planned is of one model."""
    def check(jobs: list[dict]) -> None:
        chain = {(j["wildcards"]["backbone"], j["wildcards"]["run"]) for j in jobs
                 if j["rule"] in ("encode_corpus", "impact_index", "encode_queries", "impact_retrieve", "evaluate")}
        assert chain == {(backbone, run)}, chain
    return check


def _own_folder(jobs: list[dict]) -> None:
    outputs = [p for j in jobs for p in j["output"] if p]
    assert outputs and all(p.startswith("results/miniature/") for p in outputs), \
        [p for p in outputs if not p.startswith("results/miniature/")][:5]


MODEL_CHAIN = {"encode_corpus": 8, "impact_index": 8, "encode_queries": 4, "impact_retrieve": 12, "evaluate": 12}

# The rerun matrix: edit -> the jobs per rule it plans (the demo: 2 backbones x 2 variants and one published
# model, 3 datasets over 2 corpora, the DL19/DL20 pool shared). Every count is exact.
EDITS = [
    Edit("a typo fixed in the recipe's source (prose)", NOTHING, files=_typo_in_source, touches=(RECIPES,)),
    Edit("log_every 2 -> 3 (logging cadence)", NOTHING, files=_recipe("log_every", 3), touches=(RECIPES,)),
    Edit("checkpoint_every 8 -> 4 (checkpoint cadence)", NOTHING, files=_recipe("checkpoint_every", 4),
         touches=(RECIPES,)),
    Edit("a dataset's note reworded", {"tables": 1, "all": 1},
         config=lambda c: c["datasets"]["dl19-pool"].update(note="pooled MS MARCO passages, reworded")),
    Edit("train_gpus: 0 added to a backbone", NOTHING,
         config=lambda c: c["backbones"]["minilm"].update(train_gpus=0)),
    Edit("runtime settings: device, batch and shard sizes, budgets, threads, impact indexer", NOTHING,
         config=_runtime),
    Edit("one line removed from the DL19 qrels file, in place",
         {"settings": 1, "evaluate": 5, "evaluate_bm25": 1, **REPORTS},
         files=_drop_qrels_line, touches=(f"{POOL}/qrels.dl19.txt",)),
    Edit("one query of DL20 reworded in its file, in place",
         {"settings": 3, "encode_queries": 5, "impact_retrieve": 5, "bm25_retrieve": 1, "evaluate": 5,
          "evaluate_bm25": 1, **REPORTS},
         files=_edit_dl20_query, touches=(f"{POOL}/queries.dl20.tsv",), planned=_only_dataset("dl20-pool")),
    Edit("one passage of the DL19/DL20 pool corpus reworded, in place",
         {"prepare_corpus": 1, "corpus_digests": 1, "bm25_index": 1, "bm25_retrieve": 2, "evaluate_bm25": 2,
          "encode_corpus": 5, "impact_index": 5, "impact_retrieve": 10, "evaluate": 10, **REPORTS},
         files=_edit_pool_passage, touches=(f"{POOL}/corpus.jsonl.gz",)),
    Edit("a dataset added (a second SciFact subset)",
         {"settings": 3, "prepare_corpus": 1, "corpus_digests": 1, "bm25_index": 1, "bm25_retrieve": 1,
          "evaluate_bm25": 1, "encode_corpus": 5, "impact_index": 5, "encode_queries": 5, "impact_retrieve": 5,
          "evaluate": 5, **REPORTS},
         config=_new_scifact_subset, planned=_only_dataset("scifact-b")),
    Edit("the rescaled variant's factor 1/16 -> 1/8",
         {"rescale_head": 2, "norms_variant": 2, "norms_table": 1, "train": 2, "judge_training": 2,
          "encode_corpus": 4, "impact_index": 4, "encode_queries": 2, "impact_retrieve": 6, "evaluate": 6, **REPORTS},
         config=lambda c: c["variants"]["rescaled"].update(factor="1/8"), planned=_only_variant("rescaled")),
    Edit("a variant added (factor 1/4)",
         {"rescale_head": 2, "norms_variant": 2, "norms_table": 1, "train": 2, "judge_training": 2,
          "encode_corpus": 4, "impact_index": 4, "encode_queries": 2, "impact_retrieve": 6, "evaluate": 6, **REPORTS},
         config=lambda c: c["variants"].update(k4={"policy": "constant", "factor": "1/4"}),
         planned=_only_variant("k4")),
    Edit("lr 2e-4 -> 3e-4 (the recipe)", {"train": 4, "judge_training": 4, **MODEL_CHAIN, **REPORTS},
         files=_recipe("lr", "3.0e-4"), touches=(RECIPES,)),
    Edit("one line removed from SciFact's train qrels (the training data), in place",
         {"mine_negatives": 1, "train": 4, "judge_training": 4, **MODEL_CHAIN, **REPORTS},
         files=_drop_train_qrels_line, touches=(TRAIN_QRELS,)),
    Edit("a collapse floor changed (a judgement, not the weights)", {"judge_training": 4, **REPORTS},
         config=lambda c: c["training"].update(overrides={b: {"collapse_near_empty_d": 17.0}
                                                          for b in ("minilm", "minilm-x16")})),
    Edit("the near-empty floor lowered below the x16 baseline's terms (its verdict flips: its chain runs, "
         "nothing retrains)",
         {"judge_training": 4, "encode_corpus": 2, "impact_index": 2, "encode_queries": 1, "impact_retrieve": 3,
          "evaluate": 3, **REPORTS},
         config=lambda c: c["training"].update(overrides={b: {"collapse_near_empty_d": 5.0}
                                                          for b in ("minilm", "minilm-x16")}),
         planned=_only_model_chain("minilm-x16", "baseline")),
    Edit("BEIR query length 256 -> 128 (SciFact's queries only)",
         {"settings": 1, "encode_queries": 5, "impact_retrieve": 5, "evaluate": 5, **REPORTS},
         config=lambda c: c["encoding"].update(beir_query_max_length=128), planned=_only_dataset("scifact")),
    Edit("document length 64 -> 48", {"settings": 3, "encode_corpus": 10, "impact_index": 10, "impact_retrieve": 15,
                                      "evaluate": 15,
                                      **REPORTS},
         config=lambda c: c["encoding"].update(doc_max_length=48)),
    Edit("exclude_self off on SciFact", {"settings": 2, "impact_retrieve": 5, "bm25_retrieve": 1, "evaluate": 5,
                                         "evaluate_bm25": 1,
                                         **REPORTS},
         config=lambda c: c["datasets"]["scifact"].update(exclude_self=False), planned=_only_dataset("scifact")),
    Edit("retrieval depth k 1000 -> 100", {"settings": 3, "impact_retrieve": 15, "bm25_retrieve": 3, "evaluate": 15,
                                           "evaluate_bm25": 3, **REPORTS},
         config=lambda c: c["retrieval"].update(k=100)),
    Edit("one backbone's head inflation 16 -> 8",
         {"fetch_backbone": 1, "norms_backbone": 1, "rescale_head": 2, "norms_variant": 2, "norms_table": 1,
          "train": 2, "judge_training": 2, "encode_corpus": 4, "impact_index": 4, "encode_queries": 2,
          "impact_retrieve": 6, "evaluate": 6, **ONE_BACKBONE_REPORTS},
         config=lambda c: c["backbones"]["minilm-x16"].update(inflate_head=8), planned=_only_backbone("minilm-x16")),
    Edit("a collapse floor and the document length together (a judgement beside a change it must not hide)",
         {"judge_training": 4, "settings": 3, "encode_corpus": 10, "impact_index": 10, "impact_retrieve": 15,
          "evaluate": 15, **REPORTS},
         config=lambda c: (c["encoding"].update(doc_max_length=48),
                           c["training"].update(overrides={b: {"collapse_near_empty_d": 17.0}
                                                           for b in ("minilm", "minilm-x16")}))),
    Edit("`make miniature` after the demo (its whole DAG, in its own folder)", {}, configfile="config/miniature.yaml",
         planned=_own_folder),
]


@contextmanager
def restored(root: Path, paths: tuple[str, ...]) -> Iterator[None]:
    """Files put back as they were, bytes and times, however the block ends."""
    saved = {p: ((root / p).read_bytes(), os.stat(root / p)) for p in paths}
    try:
        yield
    finally:
        for p, (data, st) in saved.items():
            (root / p).write_bytes(data)
            os.utime(root / p, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("edit", EDITS, ids=[e.name for e in EDITS])
def test_an_edit_reruns_exactly_what_it_changes(demo: Path, edit: Edit) -> None:
    configfile = edit.configfile or DEMO_CONFIG
    if edit.config is not None:
        config = yaml.safe_load((demo / DEMO_CONFIG).read_text())
        edit.config(config)
        configfile = f"config/edited-{abs(hash(edit.name))}.yaml"
        (demo / configfile).write_text(yaml.safe_dump(config))
    with restored(demo, edit.touches):
        if edit.files is not None:
            edit.files(demo)
        proc = snakemake("all", "-n", "--cores", "2", "--configfile", configfile, cwd=demo)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    counts = {} if "Nothing to be done" in output else job_counts(proc.stdout)
    counts.pop("total", None)
    if edit.configfile:  # another experiment: its whole DAG as from scratch (nothing of the demo's reused)
        whole = job_counts(snakemake("all", "-n", "--forceall", "--cores", "2", "--configfile", edit.configfile,
                                     cwd=demo).stdout)
        whole.pop("total", None)
        assert counts == whole
    else:
        assert counts == edit.expected
    if edit.planned is not None:
        edit.planned(planned_jobs(output))


def test_the_plan_of_an_extended_run_schedules_only_its_increment(demo: Path) -> None:
    from splade_rescale.costs.schedule import plan_run

    config = yaml.safe_load((demo / DEMO_CONFIG).read_text())
    config["variants"]["k4"] = {"policy": "constant", "factor": "1/4"}
    extended = demo / "config" / "extended-by-a-variant.yaml"
    extended.write_text(yaml.safe_dump(config))
    whole, _ = plan_run(extended, None, 2, 1, root=demo)
    increment, text = plan_run(extended, None, 2, 1, root=demo, remaining=True)
    assert whole["jobs"]["train"] == 6 and increment["jobs"]["train"] == 2  # the new variant's, on two backbones
    assert "fetch_backbone" not in increment["jobs"] and "prepare_corpus" not in increment["jobs"]
    assert 0 < increment["schedule"]["wall_h"] < whole["schedule"]["wall_h"]
    assert increment["totals"] == whole["totals"]  # the bill's rows stay the whole config's
    assert "jobs still to run beside the results here (the increment)" in text
