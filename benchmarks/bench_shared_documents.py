"""The shared-documents store at scale, on the host: a corpus all of whose documents another holds (FEVER and
Climate-FEVER), through ``shared_mask``, ``fill_store`` and ``write_shared_shards``; wall seconds of each
step, the process's peak RSS, and the store's and the scratch texts' bytes per document.

What is SYNTHETIC: the texts (``--words`` random words each), and the encoder: a stub that gives each
document ``--nnz`` random terms with weights 1-200 as the pipeline's own line writer formats them
(``VectorLines``), so the store's bytes per document are those of such lines, not of a model's vectors.
What is real: the digests, the store (bucket pieces, atomic publishing, gzip), the shards written from it.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_shared_documents.py --docs 540000 --out result.json
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from splade_rescale.model.sparse_rows import SparseRows  # noqa: E402
from splade_rescale.retrieval.shard_folder import VectorLines, doc_prefix  # noqa: E402
from splade_rescale.retrieval.shared_documents import (  # noqa: E402
    SharedStore,
    doc_digest,
    fill_store,
    shared_mask,
    write_shared_shards,
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=540_000)
    p.add_argument("--words", type=int, default=80)
    p.add_argument("--nnz", type=int, default=180)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(30_000)]
    root = Path(tempfile.mkdtemp(prefix="bench-shared-"))

    def docs():
        r = np.random.default_rng(1)
        for i in range(args.docs):
            yield f"doc{i}", " ".join(vocab[j] for j in r.integers(0, len(vocab), args.words))

    lines = VectorLines()

    def encode_lines(batch):
        n = len(batch)
        indptr = np.arange(n + 1, dtype=np.int64) * args.nnz
        terms = np.sort(rng.integers(1000, 30_000, (n, args.nnz)), axis=1).ravel().astype(np.int32)
        rows = SparseRows(indptr, terms, rng.integers(1, 200, n * args.nnz).astype(np.int32))
        return lines.rows([doc_prefix(d) for d, _ in batch], rows), list(terms.reshape(n, args.nnz))

    figures = {}
    t = time.perf_counter()
    digests = np.frombuffer(b"".join(doc_digest(d, x) for d, x in docs()), dtype="V16")
    digests.tofile(root / "other.digests")
    figures["digests_s"] = time.perf_counter() - t
    t = time.perf_counter()
    mask = shared_mask("this", digests, {"other": root / "other.digests"})
    figures["mask_s"] = time.perf_counter() - t
    store = SharedStore(root / "shared", {"bench": 1})
    t = time.perf_counter()
    filled = fill_store(store, docs(), digests, mask, root / "scratch", encode_lines)
    figures["fill_store_s"] = time.perf_counter() - t
    (root / "shards").mkdir()
    t = time.perf_counter()
    stats = write_shared_shards(store, digests, mask, root / "shards", 0, 100_000)
    figures["write_shards_s"] = time.perf_counter() - t
    store_bytes = sum(p.stat().st_size for p in store.root.rglob("*.piece"))
    shard_bytes = sum(p.stat().st_size for p in (root / "shards").iterdir())
    result = {"docs": args.docs, "words": args.words, "nnz": args.nnz, **filled, "shard_docs": stats.n,
              **{k: round(v, 1) for k, v in figures.items()},
              "store_bytes_per_doc": round(store_bytes / args.docs, 1),
              "shard_bytes_per_doc": round(shard_bytes / args.docs, 1),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
              "machine": platform.processor() or platform.machine(), "python": platform.python_version()}
    shutil.rmtree(root)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
