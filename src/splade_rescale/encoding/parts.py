"""A big corpus encoded as several jobs over contiguous parts, joined into its one collection.

A document's vector depends on the document alone, so the parts' vectors are those of a one-job encode
(:func:`splade_rescale.data.corpora.part_range` cuts the ranges).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Sequence

from splade_rescale.atomic import atomic_dir, write_json
from splade_rescale.encoding.shard_folder import stats_path_for


def join_parts(parts: Sequence[str | Path], out_dir: str | Path) -> dict:
    """CLI stage: a corpus's parts, in order -> its one collection (hard links, no copy: shards numbered on in
    corpus order, so the index reads the documents in the order of a one-job encode) + the stats JSON beside
    it, summed over the parts. A part that left a SKIPPED record (collapsed, too dense) is the corpus's record."""
    from splade_rescale.encoding.skips import SKIPPED, skipped

    records = [json.loads(stats_path_for(p).read_text()) for p in parts]
    with atomic_dir(out_dir) as tmp:
        if (record := next((skipped(Path(p)) for p in parts if skipped(Path(p))), None)) is not None:
            write_json(tmp / SKIPPED, record)
            write_json(stats_path_for(out_dir), record)
            return record
        k = 0
        for p in parts:
            for shard in sorted(Path(p).glob("docs-*.jsonl.gz")):
                _link_or_copy(shard, tmp / f"docs-{k:05d}.jsonl.gz")
                k += 1
    df: Counter[str] = Counter()
    for r in records:
        df.update(r["term_df"])
    n, nnz = sum(r["n_docs"] for r in records), sum(df.values())  # a document counts a term once: df sums to nnz
    sums = {key: sum(r[key] for r in records) for key in ("n_docs_empty_vector", "seconds", "resumed_docs",
                                                           "encoded_docs", "shard_bytes")}
    if any("reused_docs" in r for r in records):  # parts that copied lines from a declared source
        sums["reused_docs"] = sum(r.get("reused_docs", 0) for r in records)
    stats = {**records[0], **sums, "n_docs": n, "mean_nnz_per_doc": nnz / n, "shards": k, "parts": len(parts),
             "term_df": dict(sorted(df.items(), key=lambda kv: int(kv[0]))),
             "docs_per_second": round(sums["encoded_docs"] / sums["seconds"], 2) if sums["seconds"] else None,
             "shard_bytes_per_doc": round(sums["shard_bytes"] / n, 1)}
    write_json(stats_path_for(out_dir), stats)
    return stats


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copyfile(src, dst)
