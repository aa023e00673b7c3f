"""evaluate.py against published figures and trec_eval (pytrec_eval), plus stats helpers."""

from __future__ import annotations

import numpy as np
import pytest
import pytrec_eval

from conftest import REPO
from splade_rescale.data.datasets import load_dataset
from splade_rescale.evaluation.evaluate import (
    compare_systems,
    correct_pvalues,
    efficiency_stats,
    evaluate_run,
    expected_flops,
    paired_test,
    run_evaluate,
)
from splade_rescale.retrieval.lucene import read_trec_run, write_trec_run
from support.trec_eval import assert_metrics_match_trec_eval

POOL = REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool"


def _qrels(year: str, in_pool: bool = False):
    suffix = ".in-pool" if in_pool else ""
    return load_dataset(year, {"source": "trec_local", "corpus": str(POOL / "corpus.jsonl.gz"),
                               "queries": str(POOL / f"queries.{year}.tsv"),
                               "qrels": str(POOL / "qrels" / f"qrels.{year}-passage{suffix}.txt")}).qrels


@pytest.mark.parametrize("year,system,published", [
    ("dl19", "BM25", 0.5058), ("dl19", "SPLADE_P_P_ENSEMBLE_DISTIL", 0.7308),
    ("dl20", "BM25", 0.4796), ("dl20", "SPLADE_P_P_ENSEMBLE_DISTIL", 0.7197)])
def test_published_runs_score_published_ndcg(year, system, published, tmp_path):
    res = run_evaluate(POOL / "runs" / f"{system}.{year}.trec", _qrels(year), "trec-dl", tmp_path / "m.json")
    assert round(res["metrics"]["nDCG@10"], 4) == published
    assert res["n_queries_evaluated"] == res["n_queries_in_run"] == {"dl19": 43, "dl20": 54}[year]
    assert res["n_queries_without_results"] == 0
    assert (tmp_path / "m.json").exists()


def _trec_eval(qrels, run, measures, rel_level=1):
    ev = pytrec_eval.RelevanceEvaluator({q: dict(v) for q, v in qrels.items()}, measures, relevance_level=rel_level)
    return ev.evaluate({q: {d: float(s) for d, s in hits} for q, hits in run.items()})


def _tied(run):
    """The run with scores rounded: many ties, so tie-breaking must match trec_eval's."""
    return {q: [(d, float(round(s))) for d, s in hits] for q, hits in run.items()}


@pytest.mark.parametrize("tied", [False, True])
def test_ranx_equals_trec_eval(tied):
    qrels = _qrels("dl19")
    run = read_trec_run(POOL / "runs" / "BM25.dl19.trec")
    run = _tied(run) if tied else run
    ours = evaluate_run(qrels, run, {"ndcg": "ndcg@10", "r1000": "recall@1000-l2", "r100": "recall@100",
                                     "mrr": "mrr@10"})["per_query"]
    te = _trec_eval(qrels, run, {"ndcg_cut.10", "recall.100", "recip_rank"})
    te2 = _trec_eval(qrels, run, {"recall.1000"}, rel_level=2)
    for q in qrels:
        assert ours["ndcg"][q] == pytest.approx(te[q]["ndcg_cut_10"], abs=1e-9)
        assert ours["r100"][q] == pytest.approx(te[q]["recall_100"], abs=1e-9)
        assert ours["r1000"][q] == pytest.approx(te2[q]["recall_1000"], abs=1e-9)
        # MRR@10 = trec_eval's reciprocal rank where the first relevant hit is in its top 10, else 0
        rr = te[q]["recip_rank"]
        assert ours["mrr"][q] == pytest.approx(rr if rr >= 0.1 else 0.0, abs=1e-9)


def test_one_metric_and_unsorted_query_ids_line_up_with_trec_eval():
    """ranx's typed lists hold queries sorted by id: the per-query scores must land on the right ids
    whatever the run's order, with one metric (ranx then returns an array, not a dict) and with
    judged queries that the run misses (scored 0)."""
    qrels = {"q10": {"a": 1, "b": 0}, "q9": {"b": 2}, "Q1": {"c": 1}, "q2": {"a": 1}, "x": {"z": 1}}
    run = {"q9": [("a", 3.0), ("b", 2.0)], "q10": [("a", 5.0), ("c", 1.0)], "q2": [("b", 2.0), ("a", 1.0)],
           "Q1": [("b", 4.0), ("a", 3.0), ("c", 2.0)]}
    ours = evaluate_run(qrels, run, {"nDCG@10": "ndcg@10"})["per_query"]["nDCG@10"]
    te = _trec_eval(qrels, run, {"ndcg_cut.10"})
    assert list(ours) == sorted(qrels) and ours["x"] == 0.0 and ours["q10"] == 1.0
    for q in run:
        assert ours[q] == pytest.approx(te[q]["ndcg_cut_10"], abs=1e-9), q
    assert len({round(v, 6) for v in ours.values()}) == 4  # distinct scores: a shifted line-up would show


def _numba_specialisations() -> int:
    """Compiled specialisations of every numba function in ranx and in our ranx inputs."""
    import sys

    from numba.core.registry import CPUDispatcher

    return sum(len(obj.signatures) for name, module in list(sys.modules.items())
               if name.startswith(("ranx", "splade_rescale")) for obj in vars(module).values()
               if isinstance(obj, CPUDispatcher))


def test_ids_of_a_new_width_compile_nothing_new():
    """ranx's Qrels/Run compiled numba functions anew for each string width of the ids: tens of seconds
    per new collection in a fresh environment. Our inputs to ranx's metrics have one signature."""
    def case(width: int) -> tuple[dict, dict]:
        ids = [f"{i:0{width}d}" for i in range(40)]
        qrels = {f"q{q:0{width}d}": {ids[q]: 1, ids[q + 1]: 2} for q in range(20)}
        run = {q: [(d, float(-i)) for i, d in enumerate(ids)] for q in qrels}
        return qrels, run

    evaluate_run(*case(3), "trec-dl")
    compiled = _numba_specialisations()
    for width in (7, 12):
        qrels, run = case(width)
        te = _trec_eval(qrels, run, {"ndcg_cut.10"})
        ours = evaluate_run(qrels, run, "trec-dl")["per_query"]["nDCG@10"]
        assert all(ours[q] == pytest.approx(te[q]["ndcg_cut_10"], abs=1e-9) for q in qrels)
    assert _numba_specialisations() == compiled


def test_ranx_equals_trec_eval_beir_style_scifact_run():
    """Binary qrels, a tied run over SciFact: BEIR metric set against trec_eval."""
    ds = load_dataset("sf", {"source": "beir_local", "path": str(POOL.parent / "scifact"), "split": "test"})
    ids = sorted(d for q in ds.qrels for d in ds.qrels[q])
    run = {q: [(d, float((int(q) * 7 + int(d)) % 5)) for d in ids[:150]] for q in sorted(ds.qrels)[:120]}
    ours = evaluate_run(ds.qrels, run, "beir")
    te = _trec_eval({q: ds.qrels[q] for q in run}, run, {"ndcg_cut.10", "recall.100"})
    for q in run:
        assert ours["per_query"]["nDCG@10"][q] == pytest.approx(te[q]["ndcg_cut_10"], abs=1e-4)
        assert ours["per_query"]["R@100"][q] == pytest.approx(te[q]["recall_100"], abs=1e-4)
    # the 180 judged queries missing from the run are reported and count as 0
    assert ours["n_queries_without_results"] == 300 - 120 and ours["n_queries_evaluated"] == 300
    assert ours["n_queries_without_judged_results"] >= 180


def test_mismatch_is_reported():
    qrels = {"a": {"d1": 1}, "b": {"d2": 1}, "c": {"d3": 0}}
    run = {"a": [("d1", 2.0)], "b": [("dx", 1.0)], "z": [("d1", 1.0)], "e": []}
    res = evaluate_run(qrels, run, "beir")
    assert res["n_queries_in_qrels"] == 3 and res["n_queries_evaluated"] == 3
    assert res["n_queries_in_run"] == 3 and res["n_queries_in_run_not_in_qrels"] == 1
    assert res["n_queries_without_results"] == 1  # c
    assert res["n_queries_without_judged_results"] == 2  # b, c
    assert res["metrics"]["nDCG@10"] == pytest.approx(1 / 3)
    assert res["per_query"]["nDCG@10"] == {"a": 1.0, "b": 0.0, "c": 0.0}


def test_flops_and_efficiency():
    qs = {"n_queries": 2, "mean_nnz_per_query": 1.5, "term_df": {"1": 2, "2": 1}}
    ds = {"n_docs": 4, "mean_nnz_per_doc": 2.0, "term_df": {"1": 1, "3": 4}}
    # p_q = {1: 1, 2: .5}, p_d = {1: .25, 3: 1} -> 0.25
    assert expected_flops(qs["term_df"], 2, ds["term_df"], 4) == pytest.approx(0.25)
    eff = efficiency_stats(qs, ds, index_size_bytes=123, search_stats={"qps": 10.0, "threads": 2})
    assert eff == {"mean_nnz_per_query": 1.5, "mean_nnz_per_doc": 2.0, "flops": 0.25,
                   "index_size_bytes": 123, "index_bytes_per_doc": 30.8, "qps": 10.0, "search_threads": 2}
    eff = efficiency_stats(qs, {**ds, "shard_bytes_per_doc": 55.5, "max_active_dims": 64})
    assert eff["shard_bytes_per_doc"] == 55.5 and eff["max_active_dims"] == 64


def test_significance_matches_ranx_and_corrections():
    from ranx.statistical_tests.paired_student_t_test import paired_student_t_test

    qrels = _qrels("dl19")
    names = ["BM25", "SPLADE_P_P_ENSEMBLE_DISTIL"]
    runs = {n: read_trec_run(POOL / "runs" / f"{n}.dl19.trec") for n in names}
    per_query = {n: evaluate_run(qrels, runs[n], "trec-dl")["per_query"]["nDCG@10"] for n in names}
    ours = compare_systems(per_query, reference="BM25", test="student")
    r = ours["SPLADE_P_P_ENSEMBLE_DISTIL"]
    assert r["delta"] == pytest.approx(0.7308 - 0.5058, abs=1e-3) and r["significant"]
    # ranx's own test on the same per-query scores (not ranx.compare on Qrels/Run objects: those compile
    # numba functions per id width in a fresh environment, for the same scipy call)
    qids = sorted(per_query["BM25"])
    ranx_p, _ = paired_student_t_test(*(np.array([per_query[n][q] for q in qids]) for n in names))
    assert r["p_value"] == pytest.approx(ranx_p, rel=1e-6)
    fisher = paired_test(per_query["BM25"], per_query[names[1]], test="fisher", n_permutations=2000)
    assert fisher["p_value"] < 0.01
    adj = correct_pvalues({"a": 0.01, "b": 0.04, "c": 0.03}, "holm")
    assert adj == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    assert correct_pvalues({"a": 0.01, "b": 0.6}, "bonferroni") == pytest.approx({"a": 0.02, "b": 1.0})
    with pytest.raises(ValueError, match="same queries"):
        paired_test({"a": 1.0}, {"b": 1.0})


# Integer impact scores of real magnitude, ties inside the top 10 whose order decides nDCG@10:
#  q1: a grade-2 document ("a") and a non-relevant one ("z") tie at 3,311,261 at ranks 9 and 10, below
#      eight non-relevant hits; Anserini lists "a" first (docid ascending), trec_eval "z" (docid descending);
#  q2: 16,777,217 ("b", grade 1) and 16,777,216 ("y", grade 0) differ as integers but are one float32
#      (above 2^24): a tie to trec_eval, "y" first;
#  q3: an exact tie at 10,000 between a grade-1 ("c") and a grade-2 document ("x") at rank 1.
MAGNITUDE_RUN = {
    "q1": [(f"n{i}", 3_400_000 - i) for i in range(8)] + [("a", 3_311_261), ("z", 3_311_261), ("m", 17)],
    "q2": [("b", 16_777_217), ("y", 16_777_216), ("p", 12_000_000)],
    "q3": [("c", 10_000), ("x", 10_000), ("o", 9_999)],
}
MAGNITUDE_QRELS = {"q1": {"a": 2, "z": 0, "n0": 0}, "q2": {"b": 1, "y": 0, "p": 2}, "q3": {"c": 1, "x": 2}}


def test_metrics_equal_trec_eval_on_the_written_run_at_real_score_magnitudes(tmp_path):
    write_trec_run(MAGNITUDE_RUN, tmp_path / "run.trec")
    res = run_evaluate(tmp_path / "run.trec", MAGNITUDE_QRELS, "beir", tmp_path / "m.json",
                       qrels_path=tmp_path / "m.qrels")
    assert assert_metrics_match_trec_eval(tmp_path / "m.json", tmp_path / "run.trec", tmp_path / "m.qrels") == 0.0
    # the run file says what Anserini said: its hits in its order, ties as ties
    lines = [line.split() for line in (tmp_path / "run.trec").read_text().splitlines()]
    assert [(line[2], line[4]) for line in lines if line[0] == "q1"][8:10] == [("a", "3311261"), ("z", "3311261")]
    # and the ties matter: Anserini's order would score each query differently
    anserini = evaluate_run(MAGNITUDE_QRELS, {q: {d: float(len(h) - i) for i, (d, _) in enumerate(h)}
                                              for q, h in MAGNITUDE_RUN.items()}, "beir")["per_query"]["nDCG@10"]
    ours = res["per_query"]["nDCG@10"]
    assert all(abs(anserini[q] - ours[q]) > 0.01 for q in MAGNITUDE_QRELS), (anserini, ours)
