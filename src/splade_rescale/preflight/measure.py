"""This machine's encode and training throughput, through the run's own code on real text.

One backbone per architecture of the config (the first it lists; the plan scales a figure to the
others of its architecture by parameters, as it does the shipped ones), fetched as the run fetches it,
with its ``head_init``. Encoding: the demo's MS MARCO passages through :func:`encode_docs` at the
config's lengths, head, precision and batch size, compiled where the run would compile (then also
uncompiled, to tell whether compiling pays), timed after a warm pass. Training: the config's recipe
for that backbone through :func:`run_training`, a few steps on the MS MARCO triples sample, timed
after two warm-up steps. The figures are written in ``config/throughputs.json``'s own shape, so the
plan takes them in place of the shipped ones.
"""

from __future__ import annotations

import csv
import datetime
import functools
import logging
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import transformers

from splade_rescale.backbones.sources import fetch_backbone
from splade_rescale.costs.model_shapes import model_shape
from splade_rescale.costs.plan import load_throughputs, train_tokens_per_query
from splade_rescale.data.datasets import load_corpus
from splade_rescale.encoding.corpus import encode_docs, load_encoder
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.model.splade import uses_bf16, worth_compiling
from splade_rescale.preflight.peer import matmul_gflops, sync
from splade_rescale.training.recipes import resolve_recipe
from splade_rescale.training.train import run_training

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
POOL = REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool"
TRIPLES = REPO / "resources" / "demo" / "msmarco-triples-sample" / "triples.tsv"
# Non-zeros kept per document where the config keeps all: an untrained head's vectors are far denser
# than a trained model's (~180 terms), and would time the writer, not the run.
TRAINED_TERMS = 256
WARM_STEPS = 2


@functools.cache
def pool_passages() -> list[tuple[str, str]]:
    """The demo's 28,606 real MS MARCO passages (the DL19/DL20 pool), as (id, text); read once."""
    docs, _ = load_corpus("msmarco-dl19-dl20-pool", {"source": "trec_local", "corpus": str(POOL / "corpus.jsonl.gz")},
                          count=False)
    return list(docs)


def architectures(config: Mapping[str, Any], root: Path = Path(".")) -> dict[str, str]:
    """{model_type: the first backbone of that type}: the backbones whose speed the run depends on."""
    found: dict[str, str] = {}
    for name, spec in config["backbones"].items():
        found.setdefault(model_shape(name, spec, root).model_type, name)
    return found


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def measure_encode(model_dir: Path, encoding: Mapping[str, Any], dev: torch.device, texts: int | None,
                   seconds: float, work: Path) -> dict[str, Any]:
    """Documents a second, texts in and gzipped shards out, timed after a warm pass (kernels; a compiled
    backbone's graphs, at most four whatever the lengths); compiled and not where the run compiles."""
    docs = pool_passages()
    max_length, batch = int(encoding["doc_max_length"]), int(encoding["batch_size"])
    settings = EncodeSettings(max_length, encoding["quantization"], encoding.get("max_active_dims") or TRAINED_TERMS,
                              batch, shard_size=len(docs))
    figures: dict[str, Any] = {}
    for compiled in ([True, False] if worth_compiling(dev, texts) else [False]):
        encoder = load_encoder(model_dir, encoding["head"], str(dev), encoding["precision"],
                               texts=texts if compiled else None)
        probe = docs[:4 * batch]
        encode_docs(encoder, probe, work / f"warm-{compiled}", settings, len(probe))
        sync(dev)
        t0 = time.perf_counter()
        encode_docs(encoder, probe, work / f"probe-{compiled}", settings, len(probe))
        n = max(len(probe), min(len(docs), round(len(probe) / (time.perf_counter() - t0) * seconds)))
        chosen = docs[:n]
        t0 = time.perf_counter()
        stats = encode_docs(encoder, chosen, work / f"timed-{compiled}", settings, n)
        sync(dev)
        figures["compiled" if compiled else "eager"] = round(n / (time.perf_counter() - t0), 1)
        lengths = encoder.tokenizer([t for _, t in chosen], truncation=True, max_length=max_length)["input_ids"]
        figures.update(docs=n, tokens_per_doc=round(sum(map(len, lengths)) / n, 1),
                       nnz_per_doc=round(stats["mean_nnz_per_doc"], 1), bf16=uses_bf16(dev, encoding["precision"]))
        del encoder
    figures["docs_per_s"] = figures.get("compiled", figures["eager"])
    return figures


def measure_training(model_dir: Path, config: Mapping[str, Any], backbone: str, dev: torch.device, steps: int,
                     work: Path) -> dict[str, Any]:
    """Queries a second of the config's recipe for ``backbone`` (its first variant), one negative a query
    (the sample's), timed from the end of the warm-up steps to the last step; compiled where the whole
    run's training compiles."""
    variant = next(iter(config["variants"]))
    run = resolve_recipe(config, backbone, variant)
    recipe = {**run, "steps": WARM_STEPS + steps, "negatives_per_query": 1, "log_every": 1,
              "checkpoint_every": 10 ** 9, "warmup_steps": 0, "flops_warmup_steps": 0}
    out = work / "train"
    record = run_training(model_dir, out / "final", out / "train_log.csv", out / "record.json", out / "checkpoints",
                          recipe, {"source": "tsv_triples", "path": str(TRIPLES)}, device=str(dev),
                          compile_texts=run["steps"] * run["batch_size"] * (2 + run["negatives_per_query"]))
    with open(out / "train_log.csv", newline="") as f:
        elapsed = [float(row["elapsed_s"]) for row in csv.DictReader(f)]
    data = {"source": "ir_datasets", "id": "msmarco-passage/train/triples-small"}  # the sample is MS MARCO's text
    tokens = train_tokens_per_query(recipe, data, load_throughputs()["text"], 1)
    return {"queries_per_s": round(steps * recipe["batch_size"] / (elapsed[-1] - elapsed[WARM_STEPS - 1]), 2),
            "tokens_per_query": round(tokens, 1), "steps": steps, "batch_size": recipe["batch_size"],
            "status": record["status"], "compiled": record["compiled_backbone"]}


def measure(config: Mapping[str, Any], dev: torch.device, texts: int | None, seconds: float, train_steps: int,
            work: Path, root: Path = Path(".")) -> dict[str, Any]:
    """Every architecture's figures on ``dev``, shaped as ``config/throughputs.json``'s ``gpu`` section, with
    when, where and with what software they were measured."""
    found: dict[str, Any] = {}
    for model_type, name in architectures(config, root).items():
        log.info("preflight: measuring %s (%s) on %s", name, model_type, dev)
        folder = work / name
        manifest = fetch_backbone(name, dict(config["backbones"][name]), folder)
        model_dir = folder / "model"
        enc = measure_encode(model_dir, config["encoding"], dev, texts, seconds, folder / "encode")
        train = measure_training(model_dir, config, name, dev, train_steps, folder)
        found[model_type] = {
            "measured": f"{datetime.date.today()}, {device_name(dev)}, by `splade-rescale preflight` ({name})",
            "backbone": name, "parameters": manifest["parameters"],
            "encode_docs_per_s": enc["docs_per_s"], "encode_tokens_per_doc": enc["tokens_per_doc"],
            "train_queries_per_s": train["queries_per_s"], "train_tokens_per_query": train["tokens_per_query"],
            "encode": enc, "train": train}
    return {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "device": device_name(dev),
            "matmul_gflops_1thread": matmul_gflops(),  # the host's speed, beside any CPU figure
            "software": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "cuda": torch.version.cuda},
            "architectures": found}
