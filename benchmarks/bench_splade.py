"""Encode and train-step throughput of our SPLADE (fused head) vs sentence-transformers' SparseEncoder.

Everything runs in one process on one device, on identical shapes, identical token ids and
identical random-init weights (one model folder, saved once, loaded fresh by every contender):

* encode: our ``SpladeEncoder`` (fused head; naive head for reference) vs ``SparseEncoder``'s
  forward (Transformer fill-mask + SpladePooling), on the same pre-tokenised B x L batch. Only
  the model forward and the pooling are timed; ``SparseEncoder.encode``'s own extras (sorting,
  tokenising, sparse conversion, copies to CPU) are left out, which can only favour it.
* train: the project's own micro-step (``splade_rescale.training.train._micro_step``: InfoNCE over
  in-batch + hard negatives, FLOPS on queries and documents) + backward + clipping + AdamW, vs
  ``SpladeLoss(SparseMultipleNegativesRankingLoss)`` called directly on the same features with
  the same regulariser weights, clipping and AdamW. The naive-head run of our step is the
  "plain loop" whose peak memory the fused head must halve.

Tokenisation is excluded from every timing: our encoder's ``features`` is memoised and
``SparseEncoder`` gets the very same token ids (ours without an attention mask where nothing is
padded, as our encoder's batches come). FLOPs count the matmuls only:
``2 x encoder-matmul-params x tokens + 2 x tokens x H x V`` per forward (attention scores are
left out), three times that per training step (forward + backward).

Runs on the H200 image without installing the package: ``PYTHONPATH=src python
benchmarks/bench_splade.py``. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import transformers
from torch import nn
from transformers import AutoModelForMaskedLM, BertConfig, ModernBertConfig, PretrainedConfig, PreTrainedTokenizerFast

from splade_rescale.model.heads import mlm_head
from splade_rescale.model.splade import Precision, SpladeEncoder, autocast_for

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4
PAD_ID, CLS_ID, SEP_ID = 0, 2, 3
LAMBDA_Q, LAMBDA_D = 5.0e-5, 1.0e-3  # the st-msmarco recipe's FLOPS weights
GIB = 1024 ** 3
TARGETS = {"encode_speedup": 2.5, "encode_frac_peak": 0.45, "train_speedup": 1.5, "train_mem_ratio": 0.5}


# ---------------------------------------------------------------------------- imports


def _import_train_step() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``_micro_step`` and ``_optimizer`` from ``splade_rescale.training.train`` (the real train step)."""
    try:
        train = importlib.import_module("splade_rescale.training.train")
    except ModuleNotFoundError as e:
        sys.exit(f"bench_splade: cannot import splade_rescale.training.train ({e}); run from the repository root "
                 "with PYTHONPATH=src and torch, transformers, tqdm and pyyaml installed")
    return train._micro_step, train._optimizer


def _import_sentence_transformers() -> tuple[type, type, type]:
    """(SparseEncoder, SpladeLoss, SparseMultipleNegativesRankingLoss), or exit with what is missing."""
    try:
        from sentence_transformers.sparse_encoder import SparseEncoder
        from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss
    except ImportError as e:
        sys.exit(f"bench_splade: sentence-transformers with sparse_encoder (>= 5.0) is required: {e}")
    return SparseEncoder, SpladeLoss, SparseMultipleNegativesRankingLoss


# ---------------------------------------------------------------------------- model and data


def backbone_config(backbone: str, tiny: bool, vocab_override: int | None) -> PretrainedConfig:
    """Random-init config of the benchmarked shape (no hub access on the GPU machine).

    modernbert-base mirrors answerdotai/ModernBERT-base (22 layers, a global-attention layer
    every third, 128-token local window). ``tiny`` keeps the architecture, shrinks every size.
    Special tokens are ids 0..4, matching the word-level tokenizer built below.
    """
    ids = dict(pad_token_id=PAD_ID)
    if backbone == "modernbert-base":
        shape = dict(vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                     num_attention_heads=12)
        if tiny:
            shape = dict(vocab_size=4096, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4)
        if vocab_override:
            shape["vocab_size"] = vocab_override
        # global_attn_every_n_layers is what transformers < 5.2x reads; newer ones derive
        # layer_types from it (its default, 3, is ModernBERT-base's too).
        return ModernBertConfig(**shape, **ids, bos_token_id=CLS_ID, cls_token_id=CLS_ID, eos_token_id=SEP_ID,
                                sep_token_id=SEP_ID, global_attn_every_n_layers=3, local_attention=128,
                                max_position_embeddings=8192, hidden_activation="gelu", norm_eps=1e-5,
                                norm_bias=False, tie_word_embeddings=True)
    sizes = {"bert-base": dict(vocab_size=30522, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                               num_attention_heads=12),
             "minilm": dict(vocab_size=30522, hidden_size=384, intermediate_size=1536, num_hidden_layers=6,
                            num_attention_heads=12)}[backbone]
    if tiny:
        sizes = dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4)
    if vocab_override:
        sizes["vocab_size"] = vocab_override
    return BertConfig(**sizes, **ids, max_position_embeddings=512, tie_word_embeddings=True)


def word_tokenizer(vocab_size: int, max_length: int) -> PreTrainedTokenizerFast:
    """Word-level tokenizer: ``w<id>`` -> id, ``[CLS] ... [SEP]``; one word is exactly one token."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL_TOKENS), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=max_length)


def save_random_model(config: PretrainedConfig, folder: Path, max_length: int, seed: int) -> None:
    """One random-init MLM model + tokenizer on disk: every contender loads these same weights."""
    torch.manual_seed(seed)
    model = AutoModelForMaskedLM.from_config(config)
    model.save_pretrained(folder)
    word_tokenizer(config.vocab_size, max_length).save_pretrained(folder)


def random_texts(n: int, tokens: int, vocab_size: int, gen: torch.Generator) -> list[str]:
    """``n`` texts of exactly ``tokens`` tokens with [CLS]/[SEP] (so no padding anywhere)."""
    ids = torch.randint(len(SPECIAL_TOKENS), vocab_size, (n, tokens - 2), generator=gen)
    return [" ".join(f"w{i}" for i in row) for row in ids.tolist()]


class TokenCache:
    """Memoised tokenisation shared by all contenders, so they see identical tensors and no tokenizer time."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, device: torch.device):
        self.tokenizer, self.device = tokenizer, device
        self._cache: dict[tuple[tuple[str, ...], int], dict[str, torch.Tensor]] = {}
        self._padded: dict[tuple[tuple[str, ...], int], bool] = {}

    def __call__(self, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
        key = (tuple(texts), max_length)
        if key not in self._cache:
            batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_length,
                                   return_tensors="pt")
            self._cache[key] = {"input_ids": batch["input_ids"].to(self.device),
                                "attention_mask": batch["attention_mask"].to(self.device)}
            self._padded[key] = bool((batch["attention_mask"] == 0).any())
        return self._cache[key]

    def ours(self, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
        """The same tensors as our encoder's ``pad`` gives them: no mask when nothing is padded."""
        features = self(texts, max_length)
        return features if self._padded[(tuple(texts), max_length)] else {"input_ids": features["input_ids"]}


class PretokenisedEncoder(SpladeEncoder):
    """Our encoder with ``features`` served from the shared cache: ``_micro_step`` runs unchanged."""

    def __init__(self, model: nn.Module, tokens: TokenCache, head: str, chunk_size: int, precision: Precision):
        super().__init__(model, tokens.tokenizer, head=head, chunk_size=chunk_size, precision=precision)
        self._tokens = tokens

    def features(self, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
        return self._tokens.ours(texts, max_length)


def load_ours(folder: Path, tokens: TokenCache, head: str, args: argparse.Namespace,
              device: torch.device) -> PretokenisedEncoder:
    model = AutoModelForMaskedLM.from_pretrained(str(folder), attn_implementation=args.attn, dtype=torch.float32)
    return PretokenisedEncoder(model, tokens, head, args.chunk_size, args.dtype).to(device)


def load_theirs(folder: Path, args: argparse.Namespace, device: torch.device) -> nn.Module:
    """``SparseEncoder`` from the same folder; its default modules for a *ForMaskedLM model are
    Transformer(fill-mask) (MLMTransformer in older releases) + SpladePooling(max)."""
    sparse_encoder_cls, _, _ = _import_sentence_transformers()
    model = sparse_encoder_cls(str(folder), device=str(device), local_files_only=True,
                               model_kwargs={"attn_implementation": args.attn, "dtype": torch.float32})
    names = [type(m).__name__ for m in model.children()]
    if "SpladePooling" not in names:
        sys.exit(f"bench_splade: SparseEncoder built {names}, expected a Transformer + SpladePooling")
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        sys.exit(f"bench_splade: SparseEncoder loaded weights as {dtypes}, expected float32 like ours")
    return model


# ---------------------------------------------------------------------------- measuring


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@dataclass
class Timing:
    seconds_per_iter: float  # median over the timed iterations
    peak_mem_gib: float | None  # torch.cuda.max_memory_allocated during the timed iterations
    over_base_gib: float | None  # that peak minus what was allocated before them (weights, AdamW state)


def timed(fn: Callable[[], Any], warmup: int, iters: int, device: torch.device) -> Timing:
    """Median wall time of ``fn`` (device synchronised after each call) after ``warmup`` untimed calls.

    The median, not the mean, so that a shared or busy host does not skew a short run.
    """
    for _ in range(warmup):
        fn()
    sync(device)
    release(device)
    base = 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    if device.type != "cuda":
        return Timing(median, None, None)
    peak = torch.cuda.max_memory_allocated(device)
    return Timing(median, peak / GIB, (peak - base) / GIB)


def matmul_peak(device: torch.device) -> tuple[float, str]:
    """Measured matmul TFLOP/s used as 'peak': bf16 8192^3 on CUDA, fp32 1024^3 on CPU (no fast bf16 here)."""
    n, dtype, iters = (8192, torch.bfloat16, 10) if device.type == "cuda" else (1024, torch.float32, 3)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    t = timed(lambda: a @ b, 3, iters, device)
    del a, b
    release(device)
    return 2 * n ** 3 / t.seconds_per_iter / 1e12, f"{str(dtype).removeprefix('torch.')} matmul {n}^3"


def forward_flops(model: nn.Module, tokens: int) -> float:
    """Matmul FLOPs of one SPLADE forward over ``tokens`` tokens: encoder + head transform + vocab projection."""
    head = mlm_head(model)
    linear = [m for m in (*head.encoder.modules(), *head.transform()) if isinstance(m, nn.Linear)]
    params = sum(m.weight.numel() for m in linear)
    vocab, hidden = head.decoder.weight.shape
    return 2.0 * params * tokens + 2.0 * tokens * hidden * vocab


# ---------------------------------------------------------------------------- the two benchmarks


@dataclass
class Row:
    phase: str
    impl: str
    unit: str
    items_per_s: float
    ms_per_iter: float
    tflops: float
    frac_peak: float
    peak_mem_gib: float | None
    over_base_gib: float | None


def _row(phase: str, impl: str, unit: str, items: int, flops: float, t: Timing, peak: float) -> Row:
    tflops = flops / t.seconds_per_iter / 1e12
    return Row(phase, impl, unit, items / t.seconds_per_iter, 1e3 * t.seconds_per_iter, tflops, tflops / peak,
               t.peak_mem_gib, t.over_base_gib)


def bench_encode(folder: Path, tokens: TokenCache, docs: list[str], args: argparse.Namespace,
                 device: torch.device, peak: float) -> tuple[list[Row], dict[str, float]]:
    """Inference forward + pooling on one pre-tokenised batch; also max |difference| to our fused output."""
    features = tokens(docs, args.doc_len)
    rows, outputs = [], {}
    for impl in ("ours-fused", "ours-naive", "sentence-transformers"):
        if impl.startswith("ours"):
            model = load_ours(folder, tokens, impl.removeprefix("ours-"), args, device).eval()

            def run() -> torch.Tensor:
                with torch.inference_mode(), autocast_for(device, args.dtype):
                    return model(**tokens.ours(docs, args.doc_len))
            backbone = model.model
        else:
            model = load_theirs(folder, args, device).eval()

            def run() -> torch.Tensor:
                with torch.inference_mode(), autocast_for(device, args.dtype):
                    return model(dict(features))["sentence_embedding"]
            backbone = model[0].auto_model
        outputs[impl] = run().float().cpu()
        t = timed(run, args.warmup, args.steps, device)
        rows.append(_row("encode", impl, "docs/s", len(docs), forward_flops(backbone, features["input_ids"].numel()),
                         t, peak))
        del model, backbone, run
        release(device)
    diffs = {f"max_abs_diff_fused_vs_{k}": float((outputs["ours-fused"] - v).abs().max())
             for k, v in outputs.items() if k != "ours-fused"}
    return rows, diffs


def bench_train(folder: Path, tokens: TokenCache, batch: list[dict[str, Any]], args: argparse.Namespace,
                device: torch.device, peak: float) -> tuple[list[Row], dict[str, float]]:
    """One optimisation step (forward, backward, clip, AdamW) per iteration, fresh weights per contender.

    Also returns each contender's loss at the initial weights (eval mode: no dropout): equal losses
    show that both sides optimise the same objective (InfoNCE over the same documents + FLOPS).
    """
    micro_step, make_optimizer = _import_train_step()
    _, splade_loss_cls, mnrl_cls = _import_sentence_transformers()
    recipe = {"negatives_per_query": args.negatives, "precision": args.dtype, "query_max_length": args.query_len,
              "doc_max_length": args.doc_len, "loss": "contrastive", "temperature": 1.0, "lr": 2.0e-5,
              "weight_decay": 0.01, "warmup_steps": 0, "steps": 10 ** 6, "max_grad_norm": 1.0}
    queries = [ex["query"] for ex in batch]
    columns = [queries, [ex["positive"] for ex in batch]] + [[ex["negatives"][k] for ex in batch]
                                                             for k in range(args.negatives)]
    n_q_tok = len(queries) * args.query_len
    n_d_tok = len(batch) * (1 + args.negatives) * args.doc_len
    rows, init_loss = [], {}
    for impl in ("ours-fused", "ours-naive", "sentence-transformers"):
        if impl.startswith("ours"):
            model = load_ours(folder, tokens, impl.removeprefix("ours-"), args, device).train()

            def loss_fn() -> torch.Tensor:
                return micro_step(model, batch, recipe, LAMBDA_Q, LAMBDA_D)[0]
            backbone = model.model
        else:
            model = load_theirs(folder, args, device).train()
            criterion = splade_loss_cls(model, loss=mnrl_cls(model), document_regularizer_weight=LAMBDA_D,
                                        query_regularizer_weight=LAMBDA_Q)
            features = [tokens(col, args.query_len if i == 0 else args.doc_len) for i, col in enumerate(columns)]

            def loss_fn() -> torch.Tensor:
                with autocast_for(device, args.dtype):
                    out = criterion([dict(f) for f in features], None)  # modules write into the dicts
                return sum(out.values()) if isinstance(out, dict) else out
            backbone = model[0].auto_model
        model.eval()  # no dropout, so that the losses are comparable
        with torch.no_grad():
            init_loss[impl] = float(loss_fn())
        model.train()
        optimizer, _ = make_optimizer(model, recipe)
        params = [p for p in model.parameters() if p.requires_grad]

        def step() -> None:
            loss_fn().backward()
            torch.nn.utils.clip_grad_norm_(params, recipe["max_grad_norm"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        t = timed(step, args.warmup, args.steps, device)
        flops = 3 * (forward_flops(backbone, n_q_tok) + forward_flops(backbone, n_d_tok))
        rows.append(_row("train", impl, "queries/s", len(batch), flops, t, peak))
        del model, backbone, optimizer, params, step, loss_fn
        release(device)
    return rows, init_loss


# ---------------------------------------------------------------------------- report


def ratios(rows: list[Row]) -> dict[str, float | None]:
    by = {(r.phase, r.impl): r for r in rows}
    enc_o, enc_t = by["encode", "ours-fused"], by["encode", "sentence-transformers"]
    tr_o, tr_n, tr_t = by["train", "ours-fused"], by["train", "ours-naive"], by["train", "sentence-transformers"]

    def mem(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None
    return {"encode_speedup": enc_o.items_per_s / enc_t.items_per_s,
            "encode_frac_peak": enc_o.frac_peak,
            "train_speedup": tr_o.items_per_s / tr_t.items_per_s,
            "train_speedup_vs_naive": tr_o.items_per_s / tr_n.items_per_s,
            "train_mem_ratio": mem(tr_o.peak_mem_gib, tr_n.peak_mem_gib),
            "train_mem_ratio_over_base": mem(tr_o.over_base_gib, tr_n.over_base_gib),
            "train_mem_ratio_vs_st": mem(tr_o.peak_mem_gib, tr_t.peak_mem_gib),
            "encode_mem_ratio_vs_st": mem(enc_o.peak_mem_gib, enc_t.peak_mem_gib)}


def print_report(report: dict[str, Any]) -> None:
    def gib(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"
    print(f"\ndevice: {report['device']}  precision: {report['precision']}  "
          f"versions: {', '.join(f'{k} {v}' for k, v in report['versions'].items())}")
    print(f"shapes: {report['shapes']}")
    print(f"peak: {report['peak_tflops']:.1f} TFLOP/s ({report['peak_kind']}, measured in this run)")
    head = (f"{'phase':<7}{'impl':<23}{'items/s':>12} {'unit':<10}{'ms/iter':>10}{'TFLOP/s':>10}{'%peak':>8}"
            f"{'peak GiB':>10}{'>base GiB':>11}")
    print(head + "\n" + "-" * len(head))
    for r in report["rows"]:
        print(f"{r['phase']:<7}{r['impl']:<23}{r['items_per_s']:>12.1f} {r['unit']:<10}{r['ms_per_iter']:>10.1f}"
              f"{r['tflops']:>10.3f}{100 * r['frac_peak']:>7.1f}%{gib(r['peak_mem_gib']):>10}"
              f"{gib(r['over_base_gib']):>11}")
    print("\nencode: max |fused - other| = " + ", ".join(f"{k.split('_vs_')[1]} {v:.2e}"
                                                       for k, v in report["encode_diffs"].items()))
    print("train: loss at the initial weights = " + ", ".join(f"{k} {v:.6f}"
                                                             for k, v in report["train_loss_at_init"].items()))
    gpu = report["device"].startswith("cuda")
    print("targets" + ("" if gpu else " (GPU targets; these are CPU figures, for reference only)") + ":")
    r = report["ratios"]
    checks = [("encode docs/s ours/ST", r["encode_speedup"], ">=", TARGETS["encode_speedup"]),
              ("encode fraction of peak", r["encode_frac_peak"], ">=", TARGETS["encode_frac_peak"]),
              ("train queries/s ours/ST", r["train_speedup"], ">=", TARGETS["train_speedup"]),
              ("train peak mem fused/plain", r["train_mem_ratio"], "<=", TARGETS["train_mem_ratio"])]
    for name, value, op, target in checks:
        if value is None:
            print(f"  {name:<30} n/a (no CUDA memory stats)  target {op} {target}")
            continue
        ok = value >= target if op == ">=" else value <= target
        verdict = ("PASS" if ok else "FAIL") if gpu else "not judged"  # a CPU run proves nothing either way
        print(f"  {name:<30} {value:7.3f}  target {op} {target}  {verdict}")
    extra = {k: v for k, v in r.items() if k not in TARGETS and v is not None}
    if extra:
        print("  also: " + ", ".join(f"{k} {v:.3f}" for k, v in extra.items()))


# ---------------------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backbone", choices=("modernbert-base", "bert-base", "minilm"), default="modernbert-base")
    p.add_argument("--cpu", action="store_true", help="run on CPU even if CUDA is available")
    p.add_argument("--tiny", action="store_true", help="2 layers, hidden 64, vocab 4096, batch 8 x 32: smoke run")
    p.add_argument("--vocab", type=int, help="override the backbone's vocabulary size")
    p.add_argument("--batch", type=int, help="encode: documents per batch (256; tiny 8)")
    p.add_argument("--doc-len", type=int, help="document tokens incl. [CLS]/[SEP] (128; tiny 32)")
    p.add_argument("--queries", type=int, help="train: queries per step (64; tiny 4)")
    p.add_argument("--query-len", type=int, help="query tokens (32; tiny 16)")
    p.add_argument("--negatives", type=int, help="train: hard negatives per query (3; tiny 1)")
    p.add_argument("--steps", type=int, help="timed iterations (10; tiny 2)")
    p.add_argument("--warmup", type=int, help="untimed iterations first (3; tiny 1)")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto",
                   help="auto: bf16 autocast on CUDA, fp32 on CPU (same for every contender)")
    p.add_argument("--chunk-size", type=int, default=8192, help="vocabulary chunk of the fused head")
    p.add_argument("--attn", default="sdpa", help="attn_implementation for every contender")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="also write the report as JSON here")
    a = p.parse_args(argv)
    defaults = dict(batch=8, doc_len=32, queries=4, query_len=16, negatives=1, steps=2, warmup=1) if a.tiny else \
        dict(batch=256, doc_len=128, queries=64, query_len=32, negatives=3, steps=10, warmup=3)
    for key, value in defaults.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if min(a.doc_len, a.query_len) < 3:
        p.error("--doc-len and --query-len must be >= 3 ([CLS] + a word + [SEP])")
    return a


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    transformers.utils.logging.disable_progress_bar()  # one "Loading weights" bar per contender otherwise
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    if device.type == "cpu" and args.dtype == "bf16":
        print("warning: bf16 on this CPU may be far slower than fp32 (no native bf16 matmul)", file=sys.stderr)
    _import_sentence_transformers()  # fail fast, before building anything
    config = backbone_config(args.backbone, args.tiny, args.vocab)
    gen = torch.Generator().manual_seed(args.seed)
    vocab = config.vocab_size
    docs = random_texts(args.batch, args.doc_len, vocab, gen)
    n = args.negatives
    batch = [{"query": q, "positive": d[0], "negatives": d[1:]}
             for q, d in zip(random_texts(args.queries, args.query_len, vocab, gen),
                             [random_texts(1 + n, args.doc_len, vocab, gen) for _ in range(args.queries)])]
    peak, peak_kind = matmul_peak(device)
    with tempfile.TemporaryDirectory(prefix="bench_splade_") as tmp:
        folder = Path(tmp)
        save_random_model(config, folder, max(args.doc_len, args.query_len), args.seed)
        tokens = TokenCache(PreTrainedTokenizerFast.from_pretrained(str(folder)), device)
        enc_rows, diffs = bench_encode(folder, tokens, docs, args, device, peak)
        train_rows, init_loss = bench_train(folder, tokens, batch, args, device, peak)
    rows = enc_rows + train_rows
    import sentence_transformers
    layer_types = getattr(config, "layer_types", None)
    bf16 = args.dtype == "bf16" or (args.dtype == "auto" and device.type == "cuda")
    report = {
        "device": f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "cpu",
        "precision": "bf16 autocast" if bf16 else "fp32",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "sentence-transformers": sentence_transformers.__version__},
        "shapes": {"backbone": args.backbone + (" (tiny)" if args.tiny else ""), "layers": config.num_hidden_layers,
                   "hidden": config.hidden_size, "vocab": vocab,
                   "global_attention_layers": None if layer_types is None else layer_types.count("full_attention"),
                   "encode": f"{args.batch} x {args.doc_len}",
                   "train": f"{args.queries} q x {args.query_len} + {args.queries * (1 + n)} d x {args.doc_len}",
                   "steps": args.steps, "warmup": args.warmup, "chunk_size": args.chunk_size, "attn": args.attn},
        "peak_tflops": peak, "peak_kind": peak_kind, "rows": [asdict(r) for r in rows],
        "encode_diffs": diffs, "train_loss_at_init": init_loss, "ratios": ratios(rows), "targets": TARGETS,
    }
    print_report(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
