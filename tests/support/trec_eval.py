"""trec_eval's numbers on the files we write (pytrec_eval: trec_eval's own code), measure by measure.

An oracle independent of our evaluation: it reads only the run file and the qrels file written beside
the metrics, and lets trec_eval rank the run (its score parsing and its ties).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytrec_eval

# our metric name -> (trec_eval measure, relevance level); MRR@10 is trec_eval's recip_rank cut at 10
MEASURES = {
    "beir": {"nDCG@10": ("ndcg_cut_10", 1), "R@100": ("recall_100", 1), "R@1000": ("recall_1000", 1)},
    "trec-dl": {"nDCG@10": ("ndcg_cut_10", 1), "R@1000": ("recall_1000", 2)},
    "msmarco": {"MRR@10": ("recip_rank", 1), "R@1000": ("recall_1000", 1)},
}


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            qid, _, docid, grade = line.split()
            qrels.setdefault(qid, {})[docid] = int(grade)
    return qrels


def read_run(path: Path) -> dict[str, dict[str, float]]:
    """The run as trec_eval gets it: the score column as written (trec_eval parses it itself)."""
    run: dict[str, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            qid, _, docid, _, score, _ = line.split()
            run.setdefault(qid, {})[docid] = float(score)
    return run


def trec_eval_scores(run_path: Path, qrels_path: Path, metric_set: str) -> dict[str, dict[str, float]]:
    """Per query, our metric names -> trec_eval's value (0 for a judged query the run misses, as ``-c``)."""
    qrels, run = read_qrels(qrels_path), read_run(run_path)
    out: dict[str, dict[str, float]] = {}
    for name, (measure, level) in MEASURES[metric_set].items():
        family, _, cut = measure.rpartition("_") if measure[-1].isdigit() else (measure, "", "")
        key = f"{family}.{cut}" if cut else family  # pytrec_eval's request: ndcg_cut.10, recall.100
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {key}, relevance_level=level)
        scores = evaluator.evaluate({q: h for q, h in run.items() if q in qrels})
        values = {q: scores[q][measure] if q in scores else 0.0 for q in qrels}
        if name == "MRR@10":
            values = {q: v if v >= 0.1 else 0.0 for q, v in values.items()}  # first relevant within the top 10
        out[name] = values
    return out


def assert_metrics_match_trec_eval(metrics_json: Path, run_path: Path, qrels_path: Path, tol: float = 1e-9) -> float:
    """Our metrics file against trec_eval on its run and qrels, per query and in the mean; the largest
    per-query difference."""
    ours = json.loads(Path(metrics_json).read_text())
    theirs = trec_eval_scores(run_path, qrels_path, ours["metric_set"])
    worst = 0.0
    for name, values in theirs.items():
        mine = ours["per_query"][name]
        assert set(mine) == set(values), (metrics_json, name)
        diff = max((abs(mine[q] - values[q]) for q in values), default=0.0)
        worst = max(worst, diff)
        assert diff <= tol, (metrics_json, name, diff)
        mean = sum(values.values()) / len(values)
        assert abs(ours["metrics"][name] - mean) <= tol, (metrics_json, name, ours["metrics"][name], mean)
    return worst
