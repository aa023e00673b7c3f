"""MLM-head norm measurement: the weights' scale, and the scale that reaches SPLADE on real text.

The paper's diagnosis is that SPLADE's unnormalised dot product inherits the MLM head's
scale. So besides the decoder's norms we record what that scale does at initialisation on a
fixed probe set of real queries and passages: logit range, SPLADE weights and sparsity.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Iterable

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from splade_rescale.atomic import write_json, write_text
from splade_rescale.model.heads import MlmHead, load_masked_lm, logit_shift, mlm_head


def read_probe_texts(path: str | Path) -> list[str]:
    """Texts of a ``id<TAB>text`` probe file."""
    texts = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2 or not parts[1].strip():
                raise ValueError(f"{path}:{lineno}: expected 'id<TAB>text' with non-empty text")
            texts.append(parts[1])
    return texts


def weight_norms(head: MlmHead) -> dict[str, Any]:
    """Norms of the decoder (vocabulary projection), its bias and the transform's LayerNorm."""
    with torch.no_grad():
        weight = head.decoder.weight.float()
        rows = weight.norm(dim=1)
        stats: dict[str, Any] = {
            "architecture": head.architecture,
            "vocab_size": weight.shape[0],
            "hidden_size": weight.shape[1],
            "decoder_tied_to_input_embeddings": head.is_tied(),
            "decoder_frobenius_norm": weight.norm().item(),
            "decoder_row_norm_mean": rows.mean().item(),
            "decoder_row_norm_max": rows.max().item(),
            "decoder_row_norm_min": rows.min().item(),
            "input_embedding_frobenius_norm": head.input_embeddings.weight.float().norm().item(),
            **_layer_norm_stats(head),
            "logit_shift": logit_shift(head.model),
        }
        bias = head.decoder.bias
        if bias is None:
            stats.update(decoder_bias=False)
        else:
            b = bias.float()
            stats.update(decoder_bias=True, decoder_bias_mean=b.mean().item(), decoder_bias_std=b.std().item(),
                         decoder_bias_min=b.min().item(), decoder_bias_max=b.max().item(),
                         decoder_bias_norm=b.norm().item())
    return stats


def _layer_norm_stats(head: MlmHead) -> dict[str, float | None]:
    """The head transform's last normalisation (a LayerNorm in every family tested); None without one."""
    norms = [m for m in head.transform() if "norm" in type(m).__name__.lower()]
    weight, bias = (getattr(norms[-1], "weight", None), getattr(norms[-1], "bias", None)) if norms else (None, None)
    return {"layernorm_weight_norm": None if weight is None else weight.float().norm().item(),
            "layernorm_weight_mean": None if weight is None else weight.float().mean().item(),
            "layernorm_bias_norm": None if bias is None else bias.float().norm().item()}


@torch.no_grad()
def activation_stats(head: MlmHead, tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int,
                     batch_size: int = 16) -> dict[str, float]:
    """Logit and SPLADE activation statistics over the real tokens of ``texts`` (naive head), with the
    model's activation shift applied: the logits are those that reach ``log1p(relu(.))``."""
    shift = logit_shift(head.model)
    logit_sum, logit_count, logit_max = 0.0, 0, float("-inf")
    nnz, mean_weight, max_weight = [], [], []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], padding=True, truncation=True,
                          max_length=max_length, return_tensors="pt")
        mask = batch["attention_mask"].bool()
        logits = head.logits(batch["input_ids"], batch["attention_mask"]).float() - shift
        real = logits[mask]
        logit_sum += real.sum().item()
        logit_count += real.numel()
        logit_max = max(logit_max, real.max().item())
        acts = torch.log1p(torch.relu(logits)) * mask.unsqueeze(-1)
        reps = acts.max(dim=1).values
        nonzero = reps > 0
        nnz.extend(nonzero.sum(dim=1).tolist())
        max_weight.extend(reps.max(dim=1).values.tolist())
        mean_weight.extend(((reps.sum(dim=1) / nonzero.sum(dim=1).clamp(min=1))).tolist())
    n = len(texts)
    return {
        "texts": n,
        "mean_logit": logit_sum / logit_count,
        "max_logit": logit_max,
        "mean_nonzeros": sum(nnz) / n,
        "mean_nonzero_weight": sum(mean_weight) / n,
        "mean_max_weight": sum(max_weight) / n,
        "max_weight": max(max_weight),
    }


def measure(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, probe: dict[str, Any]) -> dict[str, Any]:
    """All norm and probe statistics of one masked-LM model."""
    model.eval()
    head = mlm_head(model)
    queries = read_probe_texts(probe["queries"])
    passages = read_probe_texts(probe["passages"])
    return {
        **weight_norms(head),
        "probe": {"queries": probe["queries"], "passages": probe["passages"]},
        "queries": activation_stats(head, tokenizer, queries, probe.get("query_max_length", 32)),
        "passages": activation_stats(head, tokenizer, passages, probe.get("passage_max_length", 128)),
    }


def measure_model_dir(model_dir: str | Path, probe: dict[str, Any], out_path: str | Path,
                      labels: dict[str, Any]) -> dict[str, Any]:
    """Measure a saved checkpoint and write the statistics (with ``labels``) as JSON."""
    model, _ = load_masked_lm(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    stats = {**labels, **measure(model, tokenizer, probe)}
    write_json(out_path, stats)
    return stats


TABLE_COLUMNS = [
    ("backbone", "backbone"), ("variant", "variant"), ("factor", "factor"), ("architecture", "architecture"),
    ("vocab_size", "vocab"), ("hidden_size", "hidden"), ("decoder_tied_to_input_embeddings", "tied"),
    ("decoder_frobenius_norm", "decoder ‖W‖_F"), ("decoder_row_norm_mean", "row L2 mean"),
    ("decoder_row_norm_max", "row L2 max"), ("decoder_bias_mean", "bias mean"), ("logit_shift", "logit shift"),
    ("layernorm_weight_norm", "LN ‖γ‖"), ("queries.mean_logit", "q mean logit"),
    ("queries.max_logit", "q max logit"), ("queries.mean_nonzeros", "q nnz"),
    ("queries.mean_max_weight", "q max w"), ("passages.mean_nonzeros", "p nnz"),
    ("passages.mean_max_weight", "p max w"),
    # vocab_transfer variants: the probe passages' active terms before the decoder bias was shifted
    ("vocab_transfer.bias_shift.passages_nnz_before", "p nnz before bias shift"),
]
# shown only when a row has a value (a shift of 0 is none)
OPTIONAL_COLUMNS = {"p nnz before bias shift", "logit shift"}


def _lookup(stats: dict[str, Any], dotted: str) -> Any:
    value: Any = stats
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3e}"
    return str(value)


def norms_rows(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        with open(path) as f:
            stats = json.load(f)
        rows.append({label: _lookup(stats, key) for key, label in TABLE_COLUMNS})
    return rows


def write_norms_table(paths: Iterable[str | Path], md_path: str | Path, csv_path: str | Path,
                      caption: str = "") -> list[dict[str, Any]]:
    """One row per measured model (backbones, then their variants' initial models)."""
    rows = norms_rows(paths)
    labels = [label for _, label in TABLE_COLUMNS
              if label not in OPTIONAL_COLUMNS or any(row[label] not in (None, 0) for row in rows)]
    rows = [{label: row[label] for label in labels} for row in rows]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=labels)
    writer.writeheader()
    writer.writerows(rows)
    write_text(csv_path, buffer.getvalue())
    lines = [caption.rstrip(), ""] if caption else []
    lines += ["| " + " | ".join(labels) + " |", "|" + "---|" * len(labels)]
    lines += ["| " + " | ".join(_fmt(row[label]) for label in labels) + " |" for row in rows]
    write_text(md_path, "\n".join(lines) + "\n")
    return rows
