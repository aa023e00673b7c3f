"""A small hand-made results tree (TEST FIXTURES, not experiment output): norms, training logs and
manifests, per-query metrics and summaries for two backbones x two variants, one of them collapsed.

Every value differs from every other one of its kind (each system, dataset and metric has its own
scores; each run its own efficiency and non-zeros), so that a table that swapped two rows, two
columns or two datasets would render differently."""

from __future__ import annotations

import csv
import json
import random
import zlib
from pathlib import Path

from splade_rescale.evaluation.evaluate import METRIC_SETS
from splade_rescale.model.norms import write_norms_table
from splade_rescale.report.summary import summarize_backbone
from splade_rescale.training.train import LOG_COLUMNS

CONFIG = {
    "experiment": "fixture",
    "backbones": {"small": {}, "big-head": {}},
    "variants": {"baseline": {"policy": "constant", "factor": 1},
                 "rescaled": {"policy": "constant", "factor": "1/16"}},
    "reference_backbone": "small",
    "datasets": {
        "dl19-pool": {"metrics": "trec-dl", "note": "FIXTURE pool, not comparable to full-corpus numbers"},
        "scifact": {"metrics": "beir"},
        "nfcorpus": {"metrics": "beir"},
    },
}
QIDS = [f"q{i}" for i in range(40)]
# Where each backbone's weights came from, as its fetch's manifest records it (FIXTURE commit).
SOURCES = {"small": {"source": "hf", "repo_id": "org/small", "revision": "main",
                     "resolved_commit": "0123456789abcdef0123456789abcdef01234567"},
           "big-head": {"source": "local", "path": "/models/big-head", "resolved_commit": None}}


def _seed(*parts: str) -> int:
    return zlib.crc32("/".join(parts).encode())


def scores(seed: int, shift: float = 0.0) -> dict[str, float]:
    rng = random.Random(seed)
    return {q: min(1.0, rng.uniform(0.1, 0.6) + shift + rng.uniform(-0.02, 0.02) * (shift != 0)) for q in QIDS}


def nudged(base: dict[str, float], *key: str) -> dict[str, float]:
    """``base`` moved by a small amount of its own per query (a system or dataset of its own, close to it)."""
    rng = random.Random(_seed(*key))
    return {q: min(1.0, max(0.0, s + rng.uniform(-0.03, 0.03))) for q, s in base.items()}


def efficiency(*key: str) -> dict[str, float]:
    """Plausible figures of one run, different for every run."""
    rng = random.Random(_seed("efficiency", *key))
    nnz_q, nnz_d = round(rng.uniform(15, 45), 1), round(rng.uniform(90, 260), 1)
    return {"mean_nnz_per_query": nnz_q, "mean_nnz_per_doc": nnz_d, "flops": round(nnz_q * nnz_d / 3000, 3),
            "index_size_bytes": int(nnz_d * 13_000 + rng.randrange(1000)), "qps": round(rng.uniform(150, 450), 1)}


def training_log(backbone: str, variant: str) -> dict[str, float]:
    """The last logged training step of a healthy run, different for every run."""
    run = efficiency("training", backbone, variant)
    return {"step": 10, "loss": round(0.1 + _seed("loss", backbone, variant) % 100 / 1000, 3),
            "nnz_q": run["mean_nnz_per_query"], "nnz_d": run["mean_nnz_per_doc"]}


def metrics_json(dataset: str, per_query: dict[str, dict[str, float]], **labels) -> dict:
    return {"status": "ok", "dataset": dataset, "metric_set": CONFIG["datasets"][dataset]["metrics"], **labels,
            "metrics": {m: sum(v.values()) / len(v) for m, v in per_query.items()}, "per_query": per_query,
            "n_queries_evaluated": len(QIDS), "n_queries_without_results": 0,
            "efficiency": efficiency(dataset, *map(str, labels.values()))}


def write(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


# how far above the dataset's first metric (nDCG@10 or MRR@10) each other metric lies: recall is higher
METRIC_OFFSETS = {"nDCG@10": 0.0, "MRR@10": 0.0, "R@100": 0.2, "R@1000": 0.3}


def per_query_for(dataset: str, base: dict[str, float], *key: str) -> dict[str, dict[str, float]]:
    """Every metric of the dataset's set, each with per-query values of its own (``key``: the system)."""
    names = METRIC_SETS[CONFIG["datasets"][dataset]["metrics"]]
    own = nudged(base, dataset, *key)
    return {m: {q: min(1.0, s + METRIC_OFFSETS[m]) for q, s in nudged(own, m, dataset, *key).items()}
            for m in names}


def write_results(tmp_path: Path) -> dict:
    """A results tree under ``tmp_path/results`` for CONFIG: small/{baseline,rescaled} fine (rescaled
    close on BEIR, far better on dl19-pool), big-head/baseline collapsed, big-head/rescaled far
    better than small/rescaled."""
    res = tmp_path / "results"
    inputs: dict[str, list[Path]] = {"small": [], "big-head": []}
    norms = []
    for b, row_norm in (("small", 1.0), ("big-head", 17.0)):
        inputs[b].append(write(res / f"backbones/{b}/manifest.json", {"backbone": b, **SOURCES[b]}))
        norms.append(write(res / f"norms/{b}.json", {"backbone": b, "variant": "backbone", "architecture": "Bert",
                                                      "decoder_row_norm_mean": row_norm,
                                                      "decoder_frobenius_norm": 190 * row_norm}))
        inputs[b].append(norms[-1])
        for v, factor in (("baseline", 1.0), ("rescaled", 1 / 16)):
            norms.append(write(res / f"norms/{b}/{v}.json", {"backbone": b, "variant": v, "factor": factor,
                                                              "decoder_row_norm_mean": row_norm * factor}))
            inputs[b].append(norms[-1])
            collapsed = (b, v) == ("big-head", "baseline")
            inputs[b].append(write(res / f"models/{b}/{v}/manifest.json", {
                "status": "collapsed" if collapsed else "ok",
                "reason": "FIXTURE all-zero vectors" if collapsed else None,
                "collapse_step": 6 if collapsed else None, "steps_done": 6 if collapsed else 10, "steps_planned": 10,
                "recipe": {"name": "fixture"},
                "last_log": {"step": 6, "loss": 0.5, "nnz_q": 0.0, "nnz_d": 0.0} if collapsed else
                training_log(b, v)}))
            log_csv = res / f"models/{b}/{v}/train_log.csv"
            with open(log_csv, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=LOG_COLUMNS)
                writer.writeheader()
                for step in range(2, 7 if collapsed else 11, 2):
                    writer.writerow({c: 0.0 for c in LOG_COLUMNS} | {"step": step, "loss": 1.0 / step,
                                                                   "flops_q": 5.0, "flops_d": 9.0, "nnz_q": 30 - step,
                                                                   "nnz_d": 100 - step})
            inputs[b].append(log_csv)
            for d in CONFIG["datasets"]:
                path = res / f"metrics/{b}/{v}/{d}.json"
                if collapsed:
                    inputs[b].append(write(path, {"status": "collapsed", "reason": "FIXTURE all-zero vectors",
                                                  "collapse_step": 6, "metrics": None, "per_query": None}))
                    continue
                if b == "small":
                    base = scores(1, 0.3) if (v == "rescaled" and d == "dl19-pool") else scores(1)
                else:
                    base = scores(2, 0.35)
                per_query = per_query_for(d, base, b, v)
                if (b, v) == ("small", "rescaled") and d != "dl19-pool":  # its baseline's scores, each moved by
                    baseline = per_query_for(d, base, b, "baseline")       # +-0.004 in turn: no mean difference
                    per_query = {m: {q: s + (0.004 if i % 2 else -0.004) for i, (q, s) in enumerate(vals.items())}
                                 for m, vals in baseline.items()}
                inputs[b].append(write(path, metrics_json(d, per_query, backbone=b, variant=v)))
    bm25 = [write(res / f"metrics/bm25/{d}.json", metrics_json(d, per_query_for(d, scores(3), "bm25"), backbone="bm25"))
            for d in CONFIG["datasets"]]
    norms_md, norms_csv = res / "tables/norms.md", res / "tables/norms.csv"
    write_norms_table(norms, norms_md, norms_csv)
    summaries = []
    for b, files in inputs.items():
        summaries.append(res / f"summary/{b}.json")
        summarize_backbone(b, files, summaries[-1])
    return {"res": res, "summaries": summaries, "bm25": bm25, "norms_csv": norms_csv}


def md_row(text: str, backbone: str, variant: str) -> str:
    """The Markdown table row of one backbone and variant."""
    return next(line for line in text.splitlines() if line.replace(" ", "").startswith(f"|{backbone}|{variant}|"))
