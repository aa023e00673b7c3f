"""Our encoder and training step against sentence-transformers' ``SparseEncoder``, the peer a user
would pick otherwise (``splade-rescale preflight --versus sentence-transformers``).

One model folder loaded by both with fp32 weights, the same texts or token ids, the same precision
(:func:`~splade_rescale.model.splade.autocast_for` around both), one process, one device. Each round
runs ours and theirs back to back, so a shared machine's drift hits both alike; ratios are medians
of the rounds' ratios.

* ``real``: texts in, gzipped shards out: :func:`~splade_rescale.encoding.corpus.encode_docs` against
  ``SparseEncoder.encode_document`` (its own length sort, sparse output) written by our shard writer;
  and our forward alone on our pre-padded length buckets, so end to end over forward is the host's share.
* ``fixed``: one pre-tokenised batch of real tokens, no padding: our fused-head forward against
  ``SparseEncoder``'s (what that leaves out of theirs can only favour it); our matmul FLOPs over the
  device's matmul peak, measured in the same run.
* ``train``: one optimisation step (forward, backward, clipping, AdamW) of our
  :func:`~splade_rescale.training.train._micro_step` against ``SpladeLoss(SparseMultipleNegativesRankingLoss)``
  on the same features and FLOPS weights, tokenising left out of both; a passage's first tokens stand in
  for a query (the shapes are what is timed). Equal losses at the initial weights show one objective.

Targets are one GPU's at the default sizes; elsewhere the figures are reported and the targets "pending".
Over 300 lines because the three comparisons share the loaded models, the timing and one report.
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from splade_rescale.encoding.buckets import BucketBatcher
from splade_rescale.encoding.corpus import encode_docs
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.encoding.shard_folder import ShardFolder
from splade_rescale.encoding.shard_writer import ShardWriter
from splade_rescale.model.heads import mlm_head
from splade_rescale.model.sparse_rows import SparseRows
from splade_rescale.model.splade import Precision, SpladeEncoder, autocast_for
from splade_rescale.training.train import _micro_step, _optimizer

LAMBDA_Q, LAMBDA_D = 5.0e-5, 1.0e-3  # the st-msmarco recipe's FLOPS weights, on both sides
QUANTIZATION = 100
TARGETS = {"real_speedup": 2.5, "real_over_forward": 0.95, "fixed_speedup": 1.8, "fixed_frac_peak": 0.35,
           "train_speedup": 1.5}


@dataclass(frozen=True)
class PeerSizes:
    """Shapes of one comparison; the defaults are the GPU's (a CPU test runs them tiny)."""

    batch: int = 256  # texts per encode batch, real and fixed
    real_len: int = 256  # tokens a real text is cut at
    fixed_len: int = 128  # tokens of every row of the fixed batch
    queries: int = 64  # queries per training step, each with a positive and ``negatives`` documents
    query_len: int = 32
    doc_len: int = 128
    negatives: int = 3
    steps: int = 10  # timed iterations per round of the fixed forward and of the training step
    warmup: int = 3  # untimed iterations before them, every round


class _Pretokenised(SpladeEncoder):
    """Our encoder with each batch of texts tokenised once, so the timed step runs without the tokenizer, as theirs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._memo: dict[tuple[tuple[str, ...], int], dict[str, torch.Tensor]] = {}

    def features(self, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
        key = (tuple(texts), max_length)
        if key not in self._memo:
            self._memo[key] = super().features(texts, max_length)
        return self._memo[key]


def sync(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer reads the work and not its queuing."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _seconds(fn: Callable[[], Any], device: torch.device) -> float:
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def _median_seconds(fn: Callable[[], Any], device: torch.device, sizes: PeerSizes) -> float:
    for _ in range(sizes.warmup):
        fn()
    return statistics.median(_seconds(fn, device) for _ in range(sizes.steps))


def matmul_peak(device: torch.device) -> tuple[float, str]:
    """Matmul TFLOP/s measured here, the 'peak' a forward is held to: bf16 8192^3 on CUDA, fp32 1024^3
    on a CPU (where bf16 is rarely the fast path)."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (1024, torch.float32)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    seconds = _median_seconds(lambda: a @ b, device, PeerSizes(steps=5, warmup=2))
    return 2 * n ** 3 / seconds / 1e12, f"{str(dtype).removeprefix('torch.')} matmul {n}^3"


def matmul_gflops() -> float:
    """1-thread fp32 matmul GFLOPS: the host's speed, to read CPU figures of different days against."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(1024, 1024)
    a @ a
    seconds = _seconds(lambda: [a @ a for _ in range(10)], torch.device("cpu"))
    torch.set_num_threads(threads)
    return round(10 * 2 * 1024 ** 3 / seconds / 1e9, 1)


def forward_flops(model: nn.Module, tokens: int) -> float:
    """Matmul FLOPs of one SPLADE forward over ``tokens`` tokens: encoder, head transform and vocabulary
    projection (attention scores left out)."""
    head = mlm_head(model)
    linear = [m for m in (*head.encoder.modules(), *head.transform()) if isinstance(m, nn.Linear)]
    vocab, hidden = head.decoder.weight.shape
    return 2.0 * sum(m.weight.numel() for m in linear) * tokens + 2.0 * tokens * hidden * vocab


def _load_theirs(model_dir: Path, device: torch.device) -> nn.Module:
    from sentence_transformers import SparseEncoder

    return SparseEncoder(str(model_dir), device=str(device), local_files_only=True,
                         model_kwargs={"dtype": torch.float32})


def _coo_rows(reps: torch.Tensor) -> SparseRows:
    """sentence-transformers' sparse COO output as our quantised CSR rows, without densifying."""
    reps = reps.coalesce().cpu()
    rows, cols = reps.indices()
    q = torch.round(reps.values().float() * QUANTIZATION)
    keep = q > 0
    rows, cols, q = rows[keep], cols[keep], q[keep]
    indptr = np.zeros(reps.shape[0] + 1, dtype=np.int64)
    np.cumsum(torch.bincount(rows, minlength=reps.shape[0]).numpy(), out=indptr[1:])
    return SparseRows(indptr, cols.to(torch.int32).numpy(), q.to(torch.int32).numpy())


def _theirs_encode_and_write(model: nn.Module, docs: list[tuple[str, str]], out: Path, sizes: PeerSizes) -> None:
    """``encode_document`` with sparse output, written by our shard writer in our format."""
    folder = ShardFolder(out.with_name(f".{out.name}.partial"))
    folder.start({}, len(docs))
    writer = ShardWriter(folder, len(docs), 0)
    model.max_seq_length = sizes.real_len
    reps = model.encode_document([t for _, t in docs], batch_size=sizes.batch, convert_to_sparse_tensor=True,
                                 show_progress_bar=False)
    writer.put([d for d, _ in docs], [(np.arange(len(docs)), _coo_rows(reps))])
    writer.close()
    folder.finish(out)


def _largest_weight_difference(ours: Path, theirs: Path) -> int:
    """The largest difference of one quantised weight between two shard folders (a missing term weighs 0)."""
    a, b = ({row["id"]: row["vector"] for shard in sorted(folder.glob("*.jsonl.gz"))
             for row in map(json.loads, gzip.open(shard, "rt"))} for folder in (ours, theirs))
    return max((abs(a[d].get(t, 0) - b[d].get(t, 0)) for d in a for t in {*a[d], *b[d]}), default=0)


def _real(ours: SpladeEncoder, theirs: nn.Module, texts: list[str], precision: Precision, work: Path,
          sizes: PeerSizes, rounds: int) -> dict[str, Any]:
    """Texts in, shards out, ours and theirs; then our forward alone on our batches."""
    device = ours.device
    docs = [(f"d{i}", t) for i, t in enumerate(texts)]
    settings = EncodeSettings(sizes.real_len, QUANTIZATION, batch_size=sizes.batch, shard_size=len(docs))
    batcher = BucketBatcher(sizes.batch, fill=device.type == "cuda", horizon=len(docs) + 1)
    batcher.add(ours.tokenize(texts, sizes.real_len))
    batcher.flush()
    padded = [ours.pad(b.ids, b.length, b.rows) for b in batcher.due()]

    def forward() -> None:  # synchronised once, at the end: the device never waits for the host
        with torch.inference_mode(), autocast_for(device, precision):
            for features in padded:
                ours(**ours.on_device(features))

    def run_ours(some: list[tuple[str, str]] = docs, side: str = "ours") -> None:
        shutil.rmtree(work / side, ignore_errors=True)
        encode_docs(ours, iter(some), work / side, settings, len(some))

    def run_theirs(some: list[tuple[str, str]] = docs, side: str = "theirs") -> None:
        shutil.rmtree(work / side, ignore_errors=True)
        with autocast_for(device, precision):
            _theirs_encode_and_write(theirs, some, work / side, sizes)

    run_ours(docs[:sizes.batch], "warm-up")  # kernels, allocator
    run_theirs(docs[:sizes.batch], "warm-up")
    seen = [{"ours": _seconds(run_ours, device), "theirs": _seconds(run_theirs, device),
             "forward": _seconds(forward, device)} for _ in range(rounds)]
    n = len(docs)
    return {"docs": n, "rounds": seen,
            "ours_docs_per_s": statistics.median(n / r["ours"] for r in seen),
            "theirs_docs_per_s": statistics.median(n / r["theirs"] for r in seen),
            "forward_docs_per_s": statistics.median(n / r["forward"] for r in seen),
            "speedup": statistics.median(r["theirs"] / r["ours"] for r in seen),
            "over_forward": statistics.median(r["forward"] / r["ours"] for r in seen),
            "largest_weight_difference": _largest_weight_difference(work / "ours", work / "theirs")}


def _fixed_batch(ours: SpladeEncoder, texts: list[str], sizes: PeerSizes) -> torch.Tensor:
    """``batch`` x ``fixed_len`` token ids of the texts run together between the tokenizer's own special
    tokens (found around a word): real tokens, no padding."""
    tok = ours.tokenizer
    word, framed = tok("a", add_special_tokens=False)["input_ids"], tok("a")["input_ids"]
    cut = next(i for i in range(len(framed)) if framed[i:i + len(word)] == word)
    before, after = framed[:cut], framed[cut + len(word):]
    stream = np.concatenate([np.asarray(ids, dtype=np.int64)
                             for ids in tok(texts, add_special_tokens=False)["input_ids"] if ids])
    body = np.resize(stream, (sizes.batch, sizes.fixed_len - len(before) - len(after)))
    rows = np.hstack([np.tile(before, (sizes.batch, 1)), body, np.tile(after, (sizes.batch, 1))]).astype(np.int64)
    return torch.from_numpy(rows).to(ours.device)


def _fixed(ours: SpladeEncoder, theirs: nn.Module, texts: list[str], precision: Precision, peak: float,
           sizes: PeerSizes, rounds: int) -> dict[str, Any]:
    """One pre-tokenised batch: our fused-head forward against ``SparseEncoder``'s."""
    device = ours.device
    input_ids = _fixed_batch(ours, texts, sizes)
    mask = torch.ones_like(input_ids)

    def run_ours() -> torch.Tensor:
        with torch.inference_mode(), autocast_for(device, precision):
            return ours(input_ids)  # no mask where nothing is padded, as our encoder's batches come

    def run_theirs() -> torch.Tensor:
        with torch.inference_mode(), autocast_for(device, precision):
            return theirs({"input_ids": input_ids, "attention_mask": mask})["sentence_embedding"]

    difference = float((run_ours().float() - run_theirs().float()).abs().max())
    seen = [{"ours": _median_seconds(run_ours, device, sizes), "theirs": _median_seconds(run_theirs, device, sizes)}
            for _ in range(rounds)]
    seconds = statistics.median(r["ours"] for r in seen)
    tflops = forward_flops(ours.model, input_ids.numel()) / seconds / 1e12
    return {"shape": list(input_ids.shape), "rounds": seen, "ours_docs_per_s": sizes.batch / seconds,
            "theirs_docs_per_s": statistics.median(sizes.batch / r["theirs"] for r in seen),
            "speedup": statistics.median(r["theirs"] / r["ours"] for r in seen),
            "ours_tflops": tflops, "frac_peak": tflops / peak, "max_abs_difference": difference}


def _train(model_dir: Path, texts: list[str], device: torch.device, precision: Precision, sizes: PeerSizes,
           rounds: int) -> dict[str, Any]:
    """One optimisation step each, on the same features; fresh weights for each side."""
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss

    n = sizes.negatives
    columns = [[texts[(i * (2 + n) + k) % len(texts)] for i in range(sizes.queries)] for k in range(2 + n)]
    batch = [{"query": q, "positive": p, "negatives": list(negatives)} for q, p, *negatives in zip(*columns)]
    recipe = {"negatives_per_query": n, "precision": precision, "query_max_length": sizes.query_len,
              "doc_max_length": sizes.doc_len, "loss": "contrastive", "temperature": 1.0, "lr": 2.0e-5,
              "weight_decay": 0.01, "warmup_steps": 0, "steps": 10 ** 6, "max_grad_norm": 1.0}
    ours = _Pretokenised.from_pretrained(model_dir, head="fused", device=device, precision=precision)
    theirs = _load_theirs(model_dir, device)
    criterion = SpladeLoss(theirs, loss=SparseMultipleNegativesRankingLoss(theirs),
                           document_regularizer_weight=LAMBDA_D, query_regularizer_weight=LAMBDA_Q)
    features = []
    for i, column in enumerate(columns):  # our tensors, with the mask theirs always reads
        f = ours.on_device(ours.features(column, sizes.query_len if i == 0 else sizes.doc_len))
        features.append({"attention_mask": torch.ones_like(f["input_ids"]), **f})

    def loss_ours() -> torch.Tensor:
        return _micro_step(ours, batch, recipe, LAMBDA_Q, LAMBDA_D)[0]

    def loss_theirs() -> torch.Tensor:
        with autocast_for(device, precision):
            out = criterion([dict(f) for f in features], None)  # its modules write into the dicts
        return sum(out.values()) if isinstance(out, dict) else out

    steps, at_init = {}, {}
    for side, model, loss in (("ours", ours, loss_ours), ("theirs", theirs, loss_theirs)):
        model.eval()  # no dropout: the losses are comparable
        with torch.no_grad():
            at_init[side] = float(loss())
        model.train()
        optimizer, _ = _optimizer(model, recipe)
        params = [p for p in model.parameters() if p.requires_grad]

        def step(loss: Callable[[], torch.Tensor] = loss, optimizer: torch.optim.Optimizer = optimizer,
                 params: list[nn.Parameter] = params) -> None:
            loss().backward()
            torch.nn.utils.clip_grad_norm_(params, recipe["max_grad_norm"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        steps[side] = step
    seen = [{side: _median_seconds(step, device, sizes) for side, step in steps.items()} for _ in range(rounds)]
    return {"queries": sizes.queries, "documents_per_query": 1 + n, "rounds": seen, "loss_at_init": at_init,
            "ours_queries_per_s": statistics.median(sizes.queries / r["ours"] for r in seen),
            "theirs_queries_per_s": statistics.median(sizes.queries / r["theirs"] for r in seen),
            "speedup": statistics.median(r["theirs"] / r["ours"] for r in seen)}


def compare_with_sentence_transformers(model_dir: Path, texts: list[str], device: str, precision: Precision,
                                       work: Path, rounds: int = 2, sizes: PeerSizes = PeerSizes()
                                       ) -> dict[str, Any]:
    """Ours against ``SparseEncoder`` from the MLM folder ``model_dir`` on ``texts`` (real ones): the
    ``real``, ``fixed`` and ``train`` figures, ``targets`` (judged on CUDA only) and the machine.
    ``work`` holds the shards written on the way."""
    import sentence_transformers
    import transformers

    dev = torch.device(device)
    peak, peak_kind = matmul_peak(dev)
    ours = SpladeEncoder.from_pretrained(model_dir, head="fused", device=dev, precision=precision)
    theirs = _load_theirs(model_dir, dev)
    ours.eval()  # no dropout in a forward timed alone (the encode and encode_document set it themselves)
    theirs.eval()
    work.mkdir(parents=True, exist_ok=True)
    real = _real(ours, theirs, texts, precision, work, sizes, rounds)
    fixed = _fixed(ours, theirs, texts, precision, peak, sizes, rounds)
    del ours, theirs
    train = _train(model_dir, texts, dev, precision, sizes, rounds)
    figures = {"real_speedup": real["speedup"], "real_over_forward": real["over_forward"],
               "fixed_speedup": fixed["speedup"], "fixed_frac_peak": fixed["frac_peak"],
               "train_speedup": train["speedup"]}
    judged = dev.type == "cuda"
    return {"device": torch.cuda.get_device_name(dev) if judged else f"cpu ({torch.get_num_threads()} threads)",
            "precision": precision, "sizes": asdict(sizes), "rounds": rounds,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "sentence-transformers": sentence_transformers.__version__},
            "matmul_peak_tflops": peak, "matmul_peak_kind": peak_kind,
            "matmul_gflops_1thread": None if judged else matmul_gflops(),
            "real": real, "fixed": fixed, "train": train,
            "targets": {name: {"value": value, "target": f">= {TARGETS[name]}",
                               "met": value >= TARGETS[name] if judged else "pending"}
                        for name, value in figures.items()}}
