"""Pyserini's BEIR conventions on a BEIR-format fixture, through the real loaders, Lucene and ranx.

The query "3" shares its id with document "3", which repeats the query's text: Pyserini's BEIR
runs (``--remove-query``) and BEIR's evaluator (``ignore_identical_ids``) drop it. Documents
"b10" and "b2" are identical, so they tie; Anserini lists equal scores by docid ascending
("b10" < "b2" as strings), trec_eval ranks them by docid descending. Only "b2" is relevant, so the
tie order shows in nDCG@10: 1/log2(3) in Anserini's order, 1 in trec_eval's, which our run files
and metrics follow.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import pytrec_eval

from splade_rescale.data.datasets import load_dataset
from splade_rescale.evaluation.evaluate import run_evaluate
from splade_rescale.retrieval import lucene

QUERY = "solar wind magnetic storms"
DOCS = {"3": QUERY + " " + QUERY, "b2": "the solar wind reaches the earth", "b10": "the solar wind reaches the earth",
        "c": "magnetic fields of planets and other things", "d": "a recipe for bread", "e": "football results",
        "f": "a history of the printing press"}
VECTORS = {"3": {"10": 50, "20": 50}, "b2": {"10": 10}, "b10": {"10": 10}, "c": {"20": 5}, "d": {"30": 1},
           "e": {"30": 2}, "f": {"40": 1}}
QUERY_VECTOR = {"10": 2, "20": 1}  # scores: "3" 150, "b2" = "b10" 20 (a tie), "c" 5
ANSERINI = ["b10", "b2", "c"]  # Anserini's hits without the query's own id, in its order
NDCG_TREC_EVAL = 1.0  # trec_eval ranks the tie "b2" first


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> dict:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) and its dataset spec."""
    root = tmp_path_factory.mktemp("beir")
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                                               for d, t in DOCS.items()))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "3", "text": QUERY}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n3\tb2\t1\n")
    return {"source": "beir_local", "path": str(root), "split": "test", "metrics": "beir"}


@pytest.fixture(scope="module")
def impact_index(beir, tmp_path_factory) -> tuple[Path, Path]:
    """An impact index of the fixture's documents and the query-vector file, as the encode step writes them."""
    root = tmp_path_factory.mktemp("impact")
    (root / "coll").mkdir()
    (root / "coll" / "docs-00000.jsonl").write_text(
        "".join(json.dumps({"id": d, "contents": "", "vector": v}) + "\n" for d, v in VECTORS.items()))
    (root / "queries.jsonl").write_text(json.dumps({"id": "3", "vector": QUERY_VECTOR}) + "\n")
    lucene.build_impact_index(root / "coll", root / "index")
    return root / "index", root / "queries.jsonl"


def _trec_eval_ndcg(qrels: dict, run: dict) -> float:
    return pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)["3"]["ndcg_cut_10"]


def _file_run(path: Path) -> dict[str, dict[str, float]]:
    return {q: dict(h) for q, h in lucene.read_trec_run(path).items()}


@pytest.mark.parametrize("exclude_self", [None, False])
def test_impact_run_drops_own_id_and_ranks_ties_as_trec_eval(beir, impact_index, tmp_path, exclude_self):
    spec = beir if exclude_self is None else {**beir, "exclude_self": exclude_self}
    ds = load_dataset("mini", spec)
    assert ds.exclude_self is (exclude_self is None)  # on by default with metrics: beir
    index, queries = impact_index
    lucene.run_impact_search(index, queries, tmp_path / "run.trec", k=10, exclude_self=ds.exclude_self)
    lines = [line.split() for line in (tmp_path / "run.trec").read_text().splitlines()]
    expected = ANSERINI if ds.exclude_self else ["3", *ANSERINI]
    assert [line[2] for line in lines] == expected
    assert [int(line[3]) for line in lines] == list(range(1, len(expected) + 1))
    scores = {line[2]: float(line[4]) for line in lines}
    assert scores["b10"] == scores["b2"] == 20  # the tie, as Anserini scored it

    res = run_evaluate(tmp_path / "run.trec", ds.qrels, "beir", tmp_path / "m.json", exclude_self=ds.exclude_self)
    ndcg = res["per_query"]["nDCG@10"]["3"]
    assert ndcg == pytest.approx(NDCG_TREC_EVAL if ds.exclude_self else 1 / math.log2(3))
    assert _trec_eval_ndcg(ds.qrels, _file_run(tmp_path / "run.trec")) == pytest.approx(ndcg, abs=1e-12)


def test_bm25_run_drops_own_id_and_ranks_ties_as_anserini(beir, tmp_path):
    lucene.run_build_bm25_index("mini", beir, tmp_path / "bm25")
    runs = {}
    for name, spec in {"default": beir, "kept": {**beir, "exclude_self": False}}.items():
        lucene.run_bm25_search("mini", spec, tmp_path / "bm25", tmp_path / f"{name}.trec", k=10)
        runs[name] = [line.split() for line in (tmp_path / f"{name}.trec").read_text().splitlines()]
    assert "3" not in [line[2] for line in runs["default"]]
    assert runs["kept"][0][2] == "3" and [line[2] for line in runs["kept"][1:]] == [line[2] for line in runs["default"]]
    ranked = [line[2] for line in runs["default"]]
    assert ranked.index("b10") + 1 == ranked.index("b2")  # equal BM25 scores: docid ascending
    score = {line[2]: float(line[4]) for line in runs["default"]}
    assert 0 < score["b10"] - score["b2"] < 2e-6  # Anserini's own tie nudge (float32), kept

    ds = load_dataset("mini", beir)
    default = run_evaluate(tmp_path / "default.trec", ds.qrels, "beir", tmp_path / "d.json", exclude_self=True)
    # dropping the query's own id at evaluation (BEIR's evaluator) = dropping it at search (Pyserini's)
    late = run_evaluate(tmp_path / "kept.trec", ds.qrels, "beir", tmp_path / "k.json", exclude_self=True)
    assert late["per_query"] == default["per_query"] and late["n_self_hits_dropped"] == 1
    assert default["n_self_hits_dropped"] == 0
    assert default["per_query"]["nDCG@10"]["3"] == pytest.approx(1 / math.log2(ranked.index("b2") + 2))
