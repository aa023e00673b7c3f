"""The shared-documents store at scale, on the host: a corpus all of whose documents another holds (FEVER and
Climate-FEVER), through ``shared_mask``, ``fill_store`` and ``write_shared_shards``; wall seconds of each
step, the process's peak RSS, and the store's and the scratch texts' bytes per document.

What is SYNTHETIC: the texts (``--words`` random words each), and the encoder: a stub that gives each
document ``--nnz`` random terms with weights 1-200, formatted by the pipeline's own line writer
(``VectorLines``) on the publishing thread, so the store's bytes per document are those of such lines, not of
a model's vectors. The stub stands for the device: it sleeps ``--device-us`` a document (releasing the GIL,
as a CUDA call does). ``fill_device_wait_s``: the fill's wall time outside the stub, what a GPU would wait
(the pass over the texts, and whatever publishing the device outruns); the reuse's, all of its wall time.
What is real: the digests, the store (bucket pieces, atomic publishing, gzip), the shards written from it.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_shared_documents.py --docs 540000 --out result.json
"""

from __future__ import annotations

import argparse
import inspect
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--src", type=Path, default=REPO / "src",
                   help="the package's source folder: an earlier revision's (git worktree) to compare side by side")
    p.add_argument("--docs", type=int, default=540_000)
    p.add_argument("--words", type=int, default=80)
    p.add_argument("--nnz", type=int, default=180)
    p.add_argument("--device-us", type=float, default=400.0,
                   help="device microseconds a document (ModernBERT-base on an H200: about 400)")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    sys.path.insert(0, str(args.src))
    from splade_rescale.model.sparse_rows import SparseRows
    from splade_rescale.retrieval.shard_folder import VectorLines, doc_prefix
    from splade_rescale.retrieval.shared_documents import (
        SharedStore,
        doc_digest,
        fill_store,
        shared_mask,
        write_shared_shards,
    )
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(30_000)]
    root = Path(tempfile.mkdtemp(prefix="bench-shared-"))

    def docs():
        r = np.random.default_rng(1)
        for i in range(args.docs):
            yield f"doc{i}", " ".join(vocab[j] for j in r.integers(0, len(vocab), args.words))

    lines = VectorLines()

    device_s = [0.0]

    def encode(batch):
        t = time.perf_counter()
        n = len(batch)
        time.sleep(n * args.device_us / 1e6)
        indptr = np.arange(n + 1, dtype=np.int64) * args.nnz
        terms = np.sort(rng.integers(1000, 30_000, (n, args.nnz)), axis=1).ravel().astype(np.int32)
        rows = SparseRows(indptr, terms, rng.integers(1, 200, n * args.nnz).astype(np.int32))
        device_s[0] += time.perf_counter() - t
        return rows

    def to_lines(batch, rows):
        return lines.rows([doc_prefix(d) for d, _ in batch], rows), list(rows.terms.reshape(len(batch), args.nnz))

    def fill(docs):  # a revision before fill_store published on its own thread took one encode-and-format call
        if "to_lines" in inspect.signature(fill_store).parameters:
            return fill_store(store, docs, digests, mask, root / "scratch", encode, to_lines)
        return fill_store(store, docs, digests, mask, root / "scratch", lambda batch: to_lines(batch, encode(batch)))

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
    filled = fill(docs())
    figures["fill_store_s"] = time.perf_counter() - t
    figures["fill_device_s"] = device_s[0]
    figures["fill_device_wait_s"] = figures["fill_store_s"] - device_s[0]
    (root / "shards").mkdir()
    t = time.perf_counter()
    stats = write_shared_shards(store, digests, mask, root / "shards", 0, 100_000)
    figures["write_shards_s"] = time.perf_counter() - t
    t = time.perf_counter()  # a second corpus of the same documents: a pass finding all of them published
    fill(docs())
    figures["reuse_pass_s"] = time.perf_counter() - t
    figures["reuse_device_wait_s"] = figures["reuse_pass_s"] + figures["write_shards_s"]
    t = time.perf_counter()
    for _ in docs():  # what making the synthetic texts costs, inside both passes' figures
        pass
    figures["texts_s"] = time.perf_counter() - t
    store_bytes = sum(p.stat().st_size for p in store.root.rglob("*.piece"))
    shard_bytes = sum(p.stat().st_size for p in (root / "shards").iterdir())
    per_doc = {f"{k[:-2]}_us_per_doc": round(v / args.docs * 1e6, 1) for k, v in figures.items()}
    result = {"src": str(args.src), "docs": args.docs, "words": args.words, "nnz": args.nnz,
              "device_us": args.device_us, **filled, "shard_docs": stats.n,
              **{k: round(v, 1) for k, v in figures.items()}, **per_doc,
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
