"""Each rule's params hold exactly what its output depends on (splade_rescale.rule_params)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import REPO
from splade_rescale.config import load_config
from splade_rescale.data.corpora import dataset_files
from splade_rescale.rule_params import (
    backbone_spec,
    evaluation_spec,
    figure_config,
    judged_queries_digest,
    report_config,
    search_spec,
    training_cadence,
    training_recipe,
    verdict_floors,
)
from splade_rescale.training.data import streamed_files
from splade_rescale.training.recipes import resolve_recipe

DEMO = load_config(REPO / "config/demo.yaml")  # as the Snakefile sees it: recipes merged, defaults filled


def _recipe() -> dict:
    return resolve_recipe(DEMO, "minilm", "baseline")


def test_a_recipe_splits_into_trajectory_cadence_and_floors() -> None:
    recipe = _recipe()
    trajectory, cadence, floors = training_recipe(recipe), training_cadence(recipe), verdict_floors(recipe)
    assert set(cadence) == {"log_every", "checkpoint_every", "keep_checkpoints"}
    assert set(floors) == {"collapse_min_nnz", "collapse_near_empty_q", "collapse_near_empty_d",
                           "collapse_dense_fraction", "collapse_window"}
    assert "source" not in trajectory and not set(trajectory) & (set(cadence) | set(floors))
    assert set(trajectory) | set(cadence) | set(floors) | {"source"} == set(recipe)
    assert trajectory["lr"] == 2.0e-4 and trajectory["steps"] == 36 and trajectory["name"] == "demo-cpu"


def test_runtime_and_prose_keys_stay_out() -> None:
    assert backbone_spec({"source": "hf", "repo_id": "x/y", "revision": "main", "train_gpus": 4,
                          "max_length": 512}) == {"source": "hf", "repo_id": "x/y", "revision": "main"}
    config = {**DEMO, "datasets": {**DEMO["datasets"]}}
    tables, figures = report_config(config), figure_config(config)
    assert "training" not in tables and "encoding" not in tables and "recipes" not in tables
    assert tables["datasets"]["dl19-pool"]["note"] and "note" not in figures["datasets"]["dl19-pool"]


def test_exclude_self_is_resolved_so_its_default_and_its_value_are_one_key() -> None:
    beir = {"source": "beir_local", "path": "x", "split": "test", "metrics": "beir"}
    assert evaluation_spec("a", beir) == evaluation_spec("a", {**beir, "exclude_self": True})
    assert evaluation_spec("a", beir)["exclude_self"] is True
    assert evaluation_spec("a", {**beir, "note": "prose"}) == evaluation_spec("a", beir)


def test_local_files_are_listed_as_they_exist() -> None:
    spec = DEMO["datasets"]["scifact"]
    assert dataset_files(spec, "corpus", "queries", "qrels") == [
        "resources/demo/scifact/corpus.jsonl.gz", "resources/demo/scifact/queries.jsonl",
        "resources/demo/scifact/qrels/test.tsv"]
    assert dataset_files({"source": "ir_datasets", "id": "beir/scifact/test"}, "corpus", "qrels") == []


def test_the_judged_queries_digest_follows_the_queries_not_every_qrels_line(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    shutil.copytree(REPO / "resources/demo/msmarco-dl19-dl20-demo", pool)
    spec = {"source": "trec_local", "corpus": str(pool / "corpus.jsonl.gz"), "queries": str(pool / "queries.dl19.tsv"),
            "qrels": str(pool / "qrels.dl19.txt"), "metrics": "trec-dl"}

    def digest() -> str:
        judged_queries_digest.cache_clear()
        return judged_queries_digest("dl19", json.dumps(spec, sort_keys=True))

    before = digest()
    lines = (pool / "qrels.dl19.txt").read_text().splitlines(keepends=True)
    (pool / "qrels.dl19.txt").write_text("".join(lines[1:]))  # the first query keeps other judgments
    assert lines[0].split()[0] == lines[1].split()[0] and digest() == before
    qid, text = (pool / "queries.dl19.tsv").read_text().splitlines()[0].split("\t", 1)
    queries = (pool / "queries.dl19.tsv").read_text().replace(f"{qid}\t{text}", f"{qid}\t{text} edited", 1)
    (pool / "queries.dl19.tsv").write_text(queries)
    assert digest() != before
    (pool / "qrels.dl19.txt").unlink()  # not placed yet: a dry run still plans, the reading job reports it
    assert digest() is None


def test_a_search_depends_on_its_own_query_set_only() -> None:
    config = {**DEMO}
    before = search_spec(config, "minilm", "dl19-pool")
    config["encoding"] = {**DEMO["encoding"], "beir_query_max_length": 64}  # BEIR sets only
    assert search_spec(config, "minilm", "dl19-pool") == before
    assert search_spec(config, "minilm", "scifact")["queries"]["max_length"] == 64


def test_the_training_files_a_run_streams_itself_are_listed() -> None:
    """Inputs of the train job (and in its checkpoint's fingerprint): an examples file the run reads,
    and teacher scores where the examples are not prepared (a prepared file holds them)."""
    recipe = {**_recipe(), "loss": "margin_mse", "teacher_scores": "scores.tsv"}
    assert streamed_files({"source": "examples_jsonl", "path": "ex.jsonl"}, _recipe()) == ["ex.jsonl"]
    assert streamed_files({"source": "beir_local", "path": "d", "examples": "mined.jsonl"}, recipe) == [
        "mined.jsonl", "scores.tsv"]
    assert streamed_files({"source": "tsv_triples", "path": "t.tsv", "prepared": "p.jsonl"}, recipe) == []
    assert streamed_files({"source": "ir_datasets", "id": "msmarco-passage/train"}, _recipe()) == []
    assert streamed_files({"source": "ir_datasets", "id": "msmarco-passage/train"}, recipe) == ["scores.tsv"]
