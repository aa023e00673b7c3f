"""Effectiveness (ranx, matching trec_eval) and efficiency statistics of runs.

trec_eval semantics, on purpose: a run is ranked as trec_eval ranks it, by its score read as a
32-bit float descending, ties broken by docid descending (whatever the rank column says); nDCG uses linear gains
(ranx ``ndcg``, as trec_eval's ``ndcg_cut``); ``-lN`` counts grade >= N as relevant
(TREC DL recall uses grade >= 2). Unlike trec_eval's default, every query in the qrels is
evaluated: a query missing from the run scores 0 (trec_eval ``-c``), and the counts of
such mismatches are reported next to the scores so they are never silent.

Ties: the run files we write hold Anserini's hits with Anserini's scores (which documents make
the top k is Anserini's), and are ranked here as trec_eval ranks them, so that our numbers are
the ones trec_eval gives on our files and the ones Pyserini publishes (trec_eval's on Anserini's
runs, ties and all): see docs/calibration.md. Read as 32-bit floats, integer impact scores above
2^24 and scores that differ by less than their float spacing are ties too.

``exclude_self`` drops a hit whose docid is the query id before scoring, as BEIR's
``EvaluateRetrieval.evaluate(ignore_identical_ids=True)`` does; our searches have already
dropped it (Pyserini's ``--remove-query``), so on our runs it changes nothing.
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from splade_rescale.atomic import write_json

log = logging.getLogger(__name__)

Qrels = Mapping[str, Mapping[str, int]]
RunLike = Mapping[str, Sequence[tuple[str, float]]] | Mapping[str, Mapping[str, float]]

# metrics key of a dataset -> {our name: ranx name}. BEIR: the BEIR paper reports nDCG@10 and
# R@100, Pyserini's BEIR pages add R@1000; all three count grade >= 1 as relevant.
METRIC_SETS: dict[str, dict[str, str]] = {
    "msmarco": {"MRR@10": "mrr@10", "R@1000": "recall@1000"},
    "trec-dl": {"nDCG@10": "ndcg@10", "R@1000": "recall@1000-l2"},
    "beir": {"nDCG@10": "ndcg@10", "R@100": "recall@100", "R@1000": "recall@1000"},
}
PRIMARY = {"msmarco": "MRR@10", "trec-dl": "nDCG@10", "beir": "nDCG@10"}


def metric_set(name: str) -> dict[str, str]:
    """Metric names for a dataset's ``metrics:`` key."""
    if name not in METRIC_SETS:
        raise ValueError(f"metrics: {name!r} is unknown; use one of {sorted(METRIC_SETS)}")
    return METRIC_SETS[name]


def _hits(run: RunLike, qid: str) -> list[tuple[str, float]]:
    h = run[qid]
    return list(h.items()) if isinstance(h, Mapping) else [(d, float(s)) for d, s in h]


def trec_order(run: RunLike) -> dict[str, dict[str, float]]:
    """Replace scores by strictly decreasing ones in trec_eval's order: the score as a 32-bit float
    (trec_eval's ``float sim``) descending, then docid descending.

    ranx sorts a query's hits with numba's ``np.argsort`` (quicksort, not stable) on the negated
    scores (``ranx/data_structures/common.py``: ``sort_dict_by_value``), so its order of equal
    scores is no rule; given strictly decreasing scores its rankings are trec_eval's.
    """
    out: dict[str, dict[str, float]] = {}
    for qid in run:
        hits = sorted(_hits(run, qid), key=lambda h: (np.float32(h[1]), h[0]), reverse=True)
        out[qid] = {d: float(len(hits) - i) for i, (d, _) in enumerate(hits)}
    return out


def evaluate_run(qrels: Qrels, run: RunLike, metrics: str | Mapping[str, str],
                 efficiency: Mapping | None = None, exclude_self: bool = False) -> dict:
    """Aggregate and per-query scores plus query-count diagnostics.

    ``metrics``: a metric-set name (``msmarco``, ``trec-dl``, ``beir``) or {name: ranx metric}.
    ``exclude_self``: drop each query's hit on its own id first (counted in ``n_self_hits_dropped``).
    """
    from ranx import evaluate

    from splade_rescale.evaluation.ranx_inputs import ranx_lists

    mset = metric_set(metrics) if isinstance(metrics, str) else dict(metrics)
    qrels = {q: {d: int(g) for d, g in v.items()} for q, v in qrels.items() if v}
    n_self = 0
    if exclude_self:
        kept = {q: [h for h in _hits(run, q) if h[0] != q] for q in run}
        n_self = sum(len(_hits(run, q)) - len(kept[q]) for q in run)
        run = kept
    in_run = {q for q in run if _hits(run, q)}
    ordered = trec_order({q: run[q] for q in run if q in qrels and q in in_run})
    judged_retrieved = {q for q in ordered if any(d in qrels[q] for d in ordered[q])}
    per_query: dict[str, dict[str, float]] = {}
    if ordered:
        qids = sorted(ordered)
        rnames = list(mset.values())
        # ranx returns a lone metric's scores under its bare name ('ndcg' for 'ndcg@10') and then
        # fails to find it: asked twice, one metric comes back in the dict like several.
        with warnings.catch_warnings():  # numba's notice while compiling ranx's MRR kernel: harmless
            warnings.filterwarnings("ignore", message="unsafe cast from uint64 to int64")
            scores = evaluate(*ranx_lists(qrels, ordered, qids), rnames if len(rnames) > 1 else rnames * 2,
                              return_mean=False, threads=1)
        for name, rname in mset.items():
            assert len(scores[rname]) == len(qids), (rname, len(scores[rname]), len(qids))
            by_query = dict(zip(qids, map(float, scores[rname])))
            per_query[name] = {q: by_query.get(q, 0.0) for q in sorted(qrels)}
    else:
        per_query = {name: {q: 0.0 for q in sorted(qrels)} for name in mset}
    n_missing = len(set(qrels) - in_run)
    if n_missing:
        log.warning("%d of %d judged queries have no results in the run (scored 0)", n_missing, len(qrels))
    return {
        "metrics": {name: float(np.mean(list(v.values()))) for name, v in per_query.items()},
        "ranx_metrics": dict(mset),
        "n_queries_evaluated": len(qrels),
        "n_queries_in_qrels": len(qrels),
        "n_queries_in_run": len(in_run),
        "n_queries_in_run_not_in_qrels": len(in_run - set(qrels)),
        "n_queries_without_results": n_missing,
        "n_queries_without_judged_results": len(qrels) - len(judged_retrieved),
        "n_self_hits_dropped": n_self,
        "efficiency": dict(efficiency or {}),
        "per_query": per_query,
    }


# ---------------------------------------------------------------------------- efficiency


def expected_flops(query_df: Mapping[str, int], n_queries: int, doc_df: Mapping[str, int], n_docs: int) -> float:
    """Expected multiplications per query-document pair: sum_v p_q(v) p_d(v).

    p(v) = fraction of queries (documents) with a non-zero weight on term v (the SPLADE
    papers' FLOPS). The ``term_df`` dicts of encode's stats JSON are the inputs.
    """
    if not n_queries or not n_docs:
        return 0.0
    return float(sum(c * doc_df.get(t, 0) for t, c in query_df.items()) / (n_queries * n_docs))


def efficiency_stats(query_stats: Mapping | None = None, doc_stats: Mapping | None = None,
                     index_size_bytes: int | None = None, search_stats: Mapping | None = None) -> dict:
    """Gather the efficiency figures from encode/index/search stats dicts (any may be None)."""
    out: dict = {}
    if query_stats:
        out["mean_nnz_per_query"] = query_stats["mean_nnz_per_query"]
    if doc_stats:
        out["mean_nnz_per_doc"] = doc_stats["mean_nnz_per_doc"]
        for key in ("shard_bytes_per_doc", "max_active_dims"):
            if doc_stats.get(key) is not None:
                out[key] = doc_stats[key]
    if query_stats and doc_stats:
        out["flops"] = expected_flops(query_stats["term_df"], query_stats["n_queries"], doc_stats["term_df"],
                             doc_stats["n_docs"])
    if index_size_bytes is not None:
        out["index_size_bytes"] = int(index_size_bytes)
        if doc_stats and doc_stats.get("n_docs"):
            out["index_bytes_per_doc"] = round(index_size_bytes / doc_stats["n_docs"], 1)
    if search_stats and search_stats.get("qps") is not None:
        out["qps"] = search_stats["qps"]
        out["search_threads"] = search_stats.get("threads")
    return out


# ---------------------------------------------------------------------------- significance


def paired_test(a: Mapping[str, float], b: Mapping[str, float], test: str = "student",
                n_permutations: int = 10_000, seed: int = 0) -> dict:
    """Two-sided paired test on per-query scores of two systems (same queries required).

    ``student``: paired t-test (scipy ``ttest_rel``, as ranx); ``fisher``: randomisation
    test (random sign flips of the per-query differences, seeded).
    """
    if set(a) != set(b):
        raise ValueError(f"paired test needs the same queries: {len(set(a) ^ set(b))} differ; "
                         "evaluate both runs on the same qrels")
    qids = sorted(a)
    x = np.array([a[q] for q in qids], dtype=float)
    y = np.array([b[q] for q in qids], dtype=float)
    d = y - x
    if test == "student":
        from scipy.stats import ttest_rel

        p = 1.0 if np.allclose(d, 0) else float(ttest_rel(x, y, alternative="two-sided").pvalue)
    elif test == "fisher":
        rng = np.random.default_rng(seed)
        obs = abs(d.mean())
        signs = rng.choice([-1.0, 1.0], size=(n_permutations, len(d)))
        p = float((np.sum(np.abs((signs * d).mean(axis=1)) >= obs - 1e-12) + 1) / (n_permutations + 1))
    else:
        raise ValueError(f"test {test!r}: use 'student' or 'fisher'")
    return {"n": len(qids), "mean_a": float(x.mean()), "mean_b": float(y.mean()),
            "delta": float(d.mean()), "p_value": 1.0 if math.isnan(p) else p, "test": test}


def correct_pvalues(pvalues: Mapping[str, float], method: str = "holm") -> dict[str, float]:
    """Multiple-comparison correction: ``holm`` (step-down) or ``bonferroni``; returns adjusted p."""
    keys = list(pvalues)
    m = len(keys)
    if method == "bonferroni":
        return {k: min(1.0, pvalues[k] * m) for k in keys}
    if method != "holm":
        raise ValueError(f"correction {method!r}: use 'holm' or 'bonferroni'")
    order = sorted(keys, key=lambda k: pvalues[k])
    adj: dict[str, float] = {}
    running = 0.0
    for i, k in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[k]))
        adj[k] = running
    return adj


def compare_systems(per_query: Mapping[str, Mapping[str, float]], reference: str, test: str = "student",
                    correction: str = "holm", alpha: float = 0.05) -> dict[str, dict]:
    """Test every system against ``reference`` on one metric's per-query scores, corrected.

    ``per_query``: system -> {qid: score} (e.g. ``evaluate_run(...)["per_query"]["nDCG@10"]``).
    """
    res = {s: paired_test(per_query[reference], per_query[s], test) for s in per_query if s != reference}
    adj = correct_pvalues({s: r["p_value"] for s, r in res.items()}, correction)
    for s, r in res.items():
        r.update(p_adjusted=adj[s], correction=correction, significant=adj[s] < alpha, reference=reference)
    return res


# ---------------------------------------------------------------------------- stage


def run_evaluate(run_path: str | Path, qrels: Qrels, metrics: str, out_path: str | Path,
                 efficiency: Mapping | None = None, extra: Mapping | None = None,
                 qrels_path: str | Path | None = None, exclude_self: bool = False) -> dict:
    """CLI stage: TREC run file -> metrics JSON (scores, per-query, diagnostics, efficiency).

    ``qrels_path``: where to write the qrels exactly as evaluated (after subsetting and
    filtering, TREC format), so that trec_eval on the run and that file gives our number.
    ``exclude_self``: the dataset's (:func:`evaluate_run`).
    """
    from splade_rescale.data.datasets import write_qrels
    from splade_rescale.retrieval.lucene import read_trec_run

    if qrels_path:
        write_qrels(qrels, qrels_path)
    result = evaluate_run(qrels, read_trec_run(run_path), metrics, efficiency, exclude_self)
    result = {"run": str(run_path), "metric_set": metrics, **(extra or {}), **result}
    write_json(out_path, result)
    return result
