"""Queries -> query-vector JSONL (``{"id": qid, "vector": {token_id: weight}}``) + stats JSON beside.

Queries are batched by length bucket like documents (:mod:`splade_rescale.encoding.buckets`), so a
query's vector depends on the query alone.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from tqdm import tqdm

from splade_rescale.atomic import atomic_file, write_json
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.encoding.shard_folder import stats_path_for
from splade_rescale.encoding.stream import Encoder, encode_stream, non_finite_error
from splade_rescale.encoding.vector_key import bf16_autocast
from splade_rescale.encoding.vector_lines import TermStats, VectorLines, query_prefix
from splade_rescale.model.sparse_rows import NonFiniteWeights

log = logging.getLogger(__name__)


def encode_query_dict(encoder: Encoder, queries: Mapping[str, str], out_path: str | Path,
                      settings: EncodeSettings) -> dict:
    """Write ``{"id": qid, "vector": {token_id: int}}`` JSONL atomically; return stats."""
    qids = list(queries)
    t0 = time.perf_counter()
    chunks = list(encode_stream(encoder, [(q, queries[q]) for q in qids], settings.max_length, settings.quantization,
                                None, replace(settings, chunk_size=max(1, len(qids))).batching))
    secs = time.perf_counter() - t0
    stats = TermStats()
    with atomic_file(out_path) as tmp, open(tmp, "wb") as f:
        lines = VectorLines()
        for chunk, batches in chunks:
            for _, rows in batches:
                stats.add(rows)
            f.write(lines.ordered([query_prefix(q) for q, _ in chunk], batches))
    if stats.n_empty:
        log.warning("%d of %d queries have an all-zero vector", stats.n_empty, len(qids))
    return {**stats.as_dict("queries", "query"), "seconds": round(secs, 3),
            "queries_per_second_encoding": round(len(qids) / secs, 2) if secs else None,
            "quantization": settings.quantization, "max_length": settings.max_length}


def encode_queries(encoder: Encoder, model_dir: str | Path, name: str, spec: Mapping, out_path: str | Path,
                   settings: EncodeSettings, root: str | Path = ".") -> dict:
    """Dataset ``name``'s judged (subset) queries -> query-vector JSONL + stats JSON beside."""
    from splade_rescale.data.datasets import load_dataset

    ds = load_dataset(name, spec, root)
    try:
        stats = encode_query_dict(encoder, ds.queries, out_path, settings)
    except NonFiniteWeights as exc:
        raise non_finite_error(model_dir, exc, "query", f"dataset {name!r}") from None
    write_json(stats_path_for(out_path), {"dataset": name, "model_dir": str(model_dir),
                                          "bf16_autocast": bf16_autocast(encoder), **stats})
    return stats


def encode_query_sets(encoder: Encoder, model_dir: str | Path, query_sets: Mapping[str, Mapping],
                      out_dir: str | Path, settings: EncodeSettings, root: str | Path = ".") -> dict[str, dict]:
    """CLI stage: every dataset's queries with one model load -> ``out_dir/{dataset}.jsonl`` + stats.

    ``query_sets``: dataset name -> ``{"spec": its config entry, "max_length": its query length}``.
    One job per model instead of one per dataset: a model load and device start-up cost more than
    encoding most query sets.
    """
    out = {}
    for name, qs in tqdm(query_sets.items(), desc="query sets", unit="set"):
        out[name] = encode_queries(encoder, model_dir, name, qs["spec"], Path(out_dir) / f"{name}.jsonl",
                                   replace(settings, max_length=qs["max_length"]), root)
        log.info("%s: %d queries", name, out[name]["n_queries"])
    return out
