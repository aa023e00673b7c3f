"""The device's vectors score as the CPU's: the published splade-tiny encodes the demo's DL pool on
the run's device at the run's precision and on the CPU in fp32, and TREC DL 2019/2020's metrics of the
two must agree within :data:`TOLERANCE`.

Both sides go through the run's own encode (:func:`encode_docs`, :func:`encode_query_dict`: quantised
vector lines); retrieval here is the exact dot product over those integer weights, the score Lucene's
impact search computes, so the comparison is about the device's numerics alone.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from splade_rescale.data.datasets import load_dataset
from splade_rescale.encoding.corpus import encode_docs, load_encoder
from splade_rescale.encoding.queries import encode_query_dict
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.evaluation.evaluate import evaluate_run
from splade_rescale.model.splade import uses_bf16
from splade_rescale.preflight.findings import Finding
from splade_rescale.preflight.measure import POOL, REPO, pool_passages

SPLADE_TINY = REPO / "resources" / "demo" / "models" / "splade-tiny"
# Largest difference allowed in a mean metric (nDCG@10, R@1000) between bf16 autocast and fp32: bf16
# rounds each weight to 8 bits of mantissa, which reorders near-ties among the top hits; a broken kernel
# or precision path moves nDCG@10 by tenths.
TOLERANCE = 0.01
LENGTHS = {"doc": 256, "query": 32}
K = 1000


def query_sets() -> dict[str, Any]:
    """DL19 and DL20 over the pool, with the qrels of the pool's passages."""
    return {year: load_dataset(year, {"source": "trec_local", "corpus": str(POOL / "corpus.jsonl.gz"),
                                      "queries": str(POOL / f"queries.{year}.tsv"),
                                      "qrels": str(POOL / "qrels" / f"qrels.{year}-passage.in-pool.txt"),
                                      "metrics": "trec-dl"}) for year in ("dl19", "dl20")}


def judged_first(docs: list[tuple[str, str]], sets: Mapping[str, Any], limit: int | None) -> list[tuple[str, str]]:
    """The pool, or its first ``limit`` passages with the judged ones first (so a short check still has
    the passages the metrics count)."""
    if limit is None or limit >= len(docs):
        return docs
    judged = {d for s in sets.values() for q in s.qrels.values() for d in q}
    return sorted(docs, key=lambda d: d[0] not in judged)[:limit]


def _vectors(path: Path) -> tuple[list[str], torch.Tensor]:
    """Ids and the sparse matrix (rows: texts, columns: term ids) of a vector-lines file or a folder of shards."""
    files = sorted(path.glob("docs-*.jsonl.gz")) if path.is_dir() else [path]
    ids, rows, cols, vals = [], [], [], []
    for file in files:
        with (gzip.open(file, "rt") if file.suffix == ".gz" else open(file)) as f:
            for rec in map(json.loads, f):
                rows += [len(ids)] * len(rec["vector"])
                ids.append(rec["id"])
                cols += map(int, rec["vector"])
                vals += rec["vector"].values()
    return ids, torch.sparse_coo_tensor([rows, cols], torch.tensor(vals, dtype=torch.float64),
                                        (len(ids), max(cols, default=0) + 1), check_invariants=True)


def _run(doc_path: Path, query_path: Path) -> dict[str, dict[str, float]]:
    """Each query's top K passages by the dot product of the integer weights."""
    doc_ids, docs = _vectors(doc_path)
    qids, queries = _vectors(query_path)
    width = max(docs.shape[1], queries.shape[1])
    q = torch.zeros(len(qids), width, dtype=torch.float64)
    q[:, :queries.shape[1]] = queries.to_dense()
    scores = (torch.sparse_coo_tensor(docs._indices(), docs._values(), (len(doc_ids), width),
                                      check_invariants=True) @ q.T).T
    top = scores.topk(min(K, len(doc_ids)), dim=1)
    return {qid: {doc_ids[i]: float(s) for s, i in zip(vals.tolist(), idx.tolist()) if s > 0}
            for qid, vals, idx in zip(qids, top.values, top.indices)}


def metrics_on(device: str, precision: str, docs: list[tuple[str, str]], sets: Mapping[str, Any],
               work: Path) -> dict[str, dict[str, float]]:
    """{query set: its mean metrics} of splade-tiny on ``device`` at ``precision``."""
    encoder = load_encoder(SPLADE_TINY, "fused", device, precision)
    encode_docs(encoder, docs, work / "docs", EncodeSettings(LENGTHS["doc"], shard_size=len(docs)), len(docs))
    found = {}
    for name, s in sets.items():
        encode_query_dict(encoder, s.queries, work / f"{name}.jsonl", EncodeSettings(LENGTHS["query"]))
        found[name] = evaluate_run(s.qrels, _run(work / "docs", work / f"{name}.jsonl"), "trec-dl")["metrics"]
    return found


def check_parity(device: torch.device, precision: str, work: Path, limit: int | None = None
                 ) -> tuple[dict[str, Any], Finding]:
    """The device's metrics against the CPU's fp32 ones; on a CPU at fp32 the two are one run."""
    sets = query_sets()
    docs = judged_first(pool_passages(), sets, limit)
    here = metrics_on(str(device), precision, docs, sets, work / "device")
    bf16 = uses_bf16(device, precision)
    report: dict[str, Any] = {"passages": len(docs), "device": str(device), "bf16": bf16, "device_metrics": here}
    if device.type == "cpu" and not bf16:
        return report, Finding("parity", None, f"splade-tiny on {len(docs):,} pool passages, CPU fp32: "
                                               f"{_shown(here)}; the device is this CPU in fp32, nothing to compare")
    reference = report["cpu_fp32_metrics"] = metrics_on("cpu", "fp32", docs, sets, work / "cpu")
    worst = max(abs(here[s][m] - reference[s][m]) for s in here for m in here[s])
    report["max_difference"] = worst
    line = (f"splade-tiny on {len(docs):,} pool passages, {device} {'bf16' if bf16 else 'fp32'}: {_shown(here)}; "
            f"CPU fp32: {_shown(reference)}; largest difference {worst:.4f} (tolerance {TOLERANCE})")
    if worst > TOLERANCE:
        line += ("; fix: the device's numerics differ from the CPU's; try encoding.precision: fp32, and update "
                 "the GPU driver and torch's CUDA build")
    return report, Finding("parity", worst <= TOLERANCE, line)


def _shown(metrics: Mapping[str, Mapping[str, float]]) -> str:
    return ", ".join(f"{s} nDCG@10 {m['nDCG@10']:.4f}" for s, m in metrics.items())
