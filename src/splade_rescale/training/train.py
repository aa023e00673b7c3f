"""SPLADE fine-tuning: contrastive (or distillation) loss + warmed-up FLOPS, atomic checkpoints and
exact resume.

Over 400 lines because the loop and its checkpoints share the loop's state (step, sparsity series,
RNG): exact resume is checked against this one place.

A run records what happened: the final model, the log, the mean non-zeros of every step
(``sparsity.csv``) and ``training.json``. Only a non-finite loss or gradient stops it early (status
``collapsed``, the last finite weights written as the final model). Whether the run collapsed into
all-zero, near-empty or near-dense vectors is judged afterwards on that record
(:mod:`splade_rescale.training.verdict`), so new collapse floors never retrain.

A checkpoint carries a fingerprint of what its run is made from (the init's and the examples'
contents, the recipe's trajectory keys, the data spec, the effective precision): a rerun resumes
only a checkpoint of the same run, and otherwise starts over, logging what differs.

Batch layout: ``batch_size`` queries per optimisation step in total, split into
``grad_accumulation`` micro-batches and then across ranks. In-batch negatives and FLOPS are
computed over a micro-batch gathered from all ranks, exactly as one process would.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import random
import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
import torch.distributed as dist
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from splade_rescale.atomic import atomic_dir, atomic_file, write_json, write_text
from splade_rescale.digests import file_sha256, folder_sha256
from splade_rescale.model.heads import fold_logit_shift, load_masked_lm, weights_dtype
from splade_rescale.model.losses import (
    average_gradients,
    contrastive_loss,
    flops_regulariser,
    gather_rows,
    kl_loss,
    margin_mse_loss,
    regulariser_weight,
)
from splade_rescale.model.splade import SpladeEncoder, autocast_for, resolve_device, uses_bf16, worth_compiling
from splade_rescale.rule_params import training_recipe
from splade_rescale.training.data import Example, streamed_files, training_stream
from splade_rescale.training.recipes import TrainingConfigError, check_recipe_keys
from splade_rescale.training.verdict import series_csv

# not __name__, which is "__main__" under torchrun: train.log listens here
log = logging.getLogger("splade_rescale.training.train")

LOG_COLUMNS = ("step", "lr", "lambda_q", "lambda_d", "loss", "loss_rank", "loss_flops_q", "loss_flops_d",
               "flops_q", "flops_d", "nnz_q", "nnz_d", "max_weight", "mean_weight", "grad_norm",
               "queries_per_s", "elapsed_s")
_LOG_HEADER = ",".join(LOG_COLUMNS) + "\r\n"  # as csv writes it
_STAT_NAMES = ("loss", "loss_rank", "flops_q", "flops_d", "nnz_q", "nnz_d", "max_weight", "mean_weight")


def _validate(recipe: Mapping[str, Any], world: int) -> int:
    """Check the recipe's values; return queries per micro-batch per rank."""
    check_recipe_keys({k: v for k, v in recipe.items() if k != "name"}, "recipe")
    for key in ("lr", "weight_decay", "max_grad_norm", "lambda_q", "lambda_d", "temperature"):
        if isinstance(recipe[key], bool) or not isinstance(recipe[key], (int, float)):
            raise TrainingConfigError(f"{key} = {recipe[key]!r} is not a number (in YAML write 2.0e-5, not 2e-5)")
    per_rank = recipe["batch_size"] // (recipe["grad_accumulation"] * world)
    if per_rank < 1 or per_rank * recipe["grad_accumulation"] * world != recipe["batch_size"]:
        raise TrainingConfigError(f"batch_size = {recipe['batch_size']} must be a multiple of grad_accumulation "
                                  f"({recipe['grad_accumulation']}) x processes ({world})")
    if recipe["loss"] not in ("contrastive", "margin_mse", "kl"):
        raise TrainingConfigError(f"loss = {recipe['loss']!r}: use contrastive, margin_mse or kl")
    if recipe["loss"] != "contrastive" and not recipe["teacher_scores"]:
        raise TrainingConfigError(f"loss = {recipe['loss']} needs teacher_scores (a qid<TAB>docid<TAB>score "
                                  "file); set it or use loss: contrastive")
    if recipe["precision"] not in ("auto", "bf16", "fp32"):
        raise TrainingConfigError(f"precision = {recipe['precision']!r}: use auto, bf16 or fp32")
    return per_rank


# ---------------------------------------------------------------------------- pieces


# How long a rank waits in a collective before the job fails: a rank that died or hangs ends the job within
# this, not after NCCL's or gloo's own default; far above a step, a checkpoint of the paper's largest model
# (1B parameters with AdamW's moments, 16 GB) and the first step's compilation.
DDP_TIMEOUT = timedelta(minutes=30)


def _init_distributed(dev: torch.device) -> tuple[int, int, torch.device]:
    """(rank, world size, this rank's device); starts the process group under torchrun (WORLD_SIZE > 1).

    On CUDA each rank takes GPU ``LOCAL_RANK`` and makes it the current device (NCCL
    collectives and the CUDA RNG use the current device; without this every rank opens GPU 0).
    """
    if dev.type == "cuda" and "LOCAL_RANK" in os.environ:
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(dev)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=DDP_TIMEOUT)
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), dev
    return 0, 1, dev


def _optimizer(model: torch.nn.Module, recipe: Mapping[str, Any]) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (no weight decay on biases and norm weights, i.e. 1-D tensors) + linear warm-up/decay.

    On CUDA the fused AdamW: one kernel for every parameter's update instead of several per tensor.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": recipe["weight_decay"]},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=recipe["lr"], fused=all(p.is_cuda for p in params) or None)
    warm, total = recipe["warmup_steps"], recipe["steps"]

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / (warm + 1)
        return max(0.0, (total - step) / max(1, total - warm))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _rng_states(world: int) -> list[dict[str, Any]]:
    """Every rank's RNG state, in rank order (a collective: all ranks call it at the same step).

    Ranks draw different amounts of randomness (dropout over batches of different lengths),
    so each rank's state is saved and restored, not rank 0's for all.
    """
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()  # the current device: this rank's GPU
    if world == 1:
        return [state]
    states: list[Any] = [None] * world
    dist.all_gather_object(states, state)
    return states


def _set_rng_state(states: list[Mapping[str, Any]], rank: int, world: int) -> None:
    if len(states) != world:
        log.warning("checkpoint written by %d processes, resuming with %d: RNG states not restored "
                    "(dropout differs from an uninterrupted run; the data order does not)", len(states), world)
        return
    state = states[rank]
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _checkpoints(checkpoint_dir: Path) -> list[Path]:
    return sorted(checkpoint_dir.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))


def _save_checkpoint(checkpoint_dir: Path, state: dict[str, Any], keep: int) -> None:
    """Write ``step-N.pt`` atomically, then keep only the newest ``keep`` checkpoints."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    with atomic_file(checkpoint_dir / f"step-{state['step']:07d}.pt") as tmp:
        torch.save(state, tmp)
    for old in _checkpoints(checkpoint_dir)[:-max(1, keep)]:
        old.unlink(missing_ok=True)


def run_fingerprint(init_dir: Path, recipe: Mapping[str, Any], data_spec: Mapping[str, Any],
                    bf16: bool, root: Path = Path(".")) -> dict[str, Any]:
    """What a run's trajectory is made from; a checkpoint is resumed only under the same one.

    The init's contents (a rescaled init of another factor), the contents of every examples or
    teacher-scores file the run reads (a re-mined or edited file), the recipe's trajectory keys (not
    its logging or checkpoint cadence), the data spec and the effective precision (``precision:
    auto`` is bf16 on a GPU, fp32 on most CPUs). Paths are relative to ``root``.
    """
    read = [data_spec["prepared"]] if data_spec.get("prepared") else streamed_files(data_spec, recipe)
    return {"init": folder_sha256(init_dir), "examples": {f: file_sha256(root / f) for f in read} or None,
            "recipe": training_recipe(recipe), "data": {k: v for k, v in data_spec.items()
                                                        if k not in ("prepared", "examples")},
            "bf16_autocast": bf16}


def _latest_checkpoint(checkpoint_dir: Path, fingerprint: Mapping[str, Any]) -> dict[str, Any] | None:
    """The newest checkpoint of this run, memory-mapped, or None (no checkpoint, or one of another
    run: those are deleted, with one line naming what differs).

    Every DDP rank reads it. Read eagerly, each rank would hold the whole file in its private
    memory (a 1B-parameter model with its AdamW moments is ~12 GB, once per GPU). Mapped, the
    ranks share its pages through the page cache, read once per machine, and a tensor's pages
    are read only as it is copied into the model or the optimizer. (Loading on rank 0 and
    broadcasting would still hold a full copy there, and the others would need every shape
    first.)
    """
    found = _checkpoints(checkpoint_dir) if checkpoint_dir.is_dir() else []
    if not found:
        return None
    try:
        state = torch.load(found[-1], map_location="cpu", mmap=True, weights_only=True)
        theirs = state.get("fingerprint")
    except (RuntimeError, EOFError, OSError, ValueError) as exc:  # a checkpoint cut short by a crash
        state, theirs = None, {"unreadable": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    if theirs == dict(fingerprint):
        return state
    theirs = theirs or {"written by": "an older trainer"}
    diff = sorted(k for k in set(fingerprint) | set(theirs) if fingerprint.get(k) != theirs.get(k))
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # every rank has looked before rank 0 deletes
    log.warning("%s: checkpoint of another run (%s differ); starting over", found[-1], ", ".join(diff))
    if int(os.environ.get("RANK", "0")) == 0:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return None


def _resume(checkpoint_dir: Path, fingerprint: Mapping[str, Any], encoder: SpladeEncoder,
            optimizer: torch.optim.Optimizer, scheduler: Any, rank: int, world: int) -> dict[str, Any] | None:
    """Restore model, optimizer, scheduler and RNG from the newest checkpoint; return its other
    entries (None without a checkpoint). The state's tensors are not kept: on a GPU nothing
    then refers to the mapped file; on the CPU the AdamW moments stay mapped copy-on-write
    until the first step writes them."""
    state = _latest_checkpoint(checkpoint_dir, fingerprint)
    if state is None:
        return None
    encoder.model.load_state_dict(state.pop("model"))
    optimizer.load_state_dict(state.pop("optimizer"))
    scheduler.load_state_dict(state.pop("scheduler"))
    _set_rng_state(state.pop("rng"), rank, world)
    return state


def _start_log(log_csv: Path, text: str) -> None:
    """Write the log as the checkpoint saw it (a header alone when starting afresh).

    The rows up to the checkpoint live inside it, because Snakemake deletes a failed job's
    train_log.csv while the checkpoints folder (a param) survives; rows after it are dropped.
    """
    with atomic_file(log_csv) as tmp, open(tmp, "w", newline="") as f:
        f.write(text)


def _append_log(log_csv: Path, row: Mapping[str, Any]) -> None:
    with open(log_csv, "a", newline="") as f:
        csv.DictWriter(f, fieldnames=LOG_COLUMNS).writerow(
            {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def _batches(stream: Iterator[Example], size: int, negatives: int) -> Iterator[list[Example]]:
    while True:
        batch = [next(stream) for _ in range(size)]
        short = min(len(ex["negatives"]) for ex in batch)
        if short < negatives:
            raise TrainingConfigError(f"negatives_per_query = {negatives} but the training data gives only "
                                      f"{short} negative(s) per example; lower negatives_per_query")
        yield batch


def _micro_step(encoder: SpladeEncoder, batch: list[Example], recipe: Mapping[str, Any],
                lam_q: float, lam_d: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss of one micro-batch (this rank's share) and its detached statistics."""
    n = recipe["negatives_per_query"]
    docs = [ex["positive"] for ex in batch] + [d for ex in batch for d in ex["negatives"][:n]]
    with autocast_for(encoder.device, recipe["precision"]):
        q = encoder(**encoder.on_device(encoder.features([ex["query"] for ex in batch],
                                                         recipe["query_max_length"]))).float()
        d = encoder(**encoder.on_device(encoder.features(docs, recipe["doc_max_length"]))).float()
    # Documents of all ranks: positives first (in rank order), then negatives.
    b = len(batch)
    pos_all, offset = gather_rows(d[:b])
    neg_all, _ = gather_rows(d[b:])
    q_all, _ = gather_rows(q)
    if recipe["loss"] == "contrastive":
        rank_loss = contrastive_loss(q, torch.cat([pos_all, neg_all]), recipe["temperature"], offset)
    else:
        teacher = torch.tensor([ex["teacher"][:n + 1] for ex in batch], device=q.device)
        fn = margin_mse_loss if recipe["loss"] == "margin_mse" else kl_loss
        rank_loss = fn(q, d, teacher)
    flops_q, flops_d = flops_regulariser(q_all), flops_regulariser(torch.cat([pos_all, neg_all]))
    loss = rank_loss + lam_q * flops_q + lam_d * flops_d
    with torch.no_grad():
        stats = torch.stack([loss, rank_loss, flops_q, flops_d, (q > 0).sum(1).float().mean(),
                             (d > 0).sum(1).float().mean(), torch.maximum(q.max(), d.max()),
                             torch.cat([q, d]).mean()]).detach()
    return loss, stats


def _write_final(encoder: SpladeEncoder, final_dir: Path, max_length: int) -> None:
    """Save a folder that loads with AutoModelForMaskedLM and as a sentence-transformers SparseEncoder.

    The sentence-transformers files (modules.json, sentence_bert_config.json,
    1_SpladePooling/config.json, config_sentence_transformers.json) are written by
    sentence-transformers itself, from a Transformer(fill-mask) + SpladePooling(max) model. An
    activation shift is folded into the decoder bias first: SpladePooling applies none.
    """
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    fold_logit_shift(encoder.model)
    with atomic_dir(final_dir) as tmp:
        encoder.model.save_pretrained(tmp)
        encoder.tokenizer.save_pretrained(tmp)
        st_model = SparseEncoder(modules=[
            Transformer(str(tmp), transformer_task="fill-mask", max_seq_length=max_length),
            SpladePooling(pooling_strategy="max", embedding_dimension=encoder.vocab_size)], device="cpu")
        st_model.save(str(tmp), create_model_card=False)


def _file_logger(path: Path) -> logging.Handler:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("splade_rescale").addHandler(handler)
    logging.getLogger("splade_rescale").setLevel(logging.INFO)
    return handler


# ---------------------------------------------------------------------------- trainer


def run_training(init_dir: str | Path, final_dir: str | Path, log_csv: str | Path, record_path: str | Path,
                 checkpoint_dir: str | Path, recipe: Mapping[str, Any], data_spec: Mapping[str, Any],
                 device: str = "auto", root: str | Path = ".", log_file: str | Path | None = None,
                 series_path: str | Path | None = None, compile_texts: int | None = None) -> dict[str, Any]:
    """Train SPLADE from ``init_dir``; resume from ``checkpoint_dir`` if it holds this run's checkpoint.
    ``compile_texts``: the texts the compile decision is made for (default: this run's; a few steps timed
    for a whole run's speed give the whole run's).

    Writes the final model (also after a non-finite stop), the CSV log, ``log_file`` (Python
    logging; default ``train.log`` beside the CSV), the per-step non-zeros (``series_path``,
    default ``sparsity.csv`` beside the record) and the training record; returns the record. Its
    ``status`` is ``collapsed`` only for a non-finite stop: the sparsity verdict is
    :func:`splade_rescale.training.verdict.judge`'s.
    """
    final_dir, log_csv, checkpoint_dir = Path(final_dir), Path(log_csv), Path(checkpoint_dir)
    record_path = Path(record_path)
    series_path = Path(series_path) if series_path else record_path.with_name("sparsity.csv")
    recipe = dict(recipe)
    rank, world, dev = _init_distributed(resolve_device(device))
    per_rank = _validate(recipe, world)
    handler = _file_logger(Path(log_file) if log_file else log_csv.parent / "train.log") if rank == 0 else None
    try:
        texts = compile_texts or recipe["steps"] * recipe["batch_size"] * (2 + recipe["negatives_per_query"])
        return _train(Path(init_dir), final_dir, log_csv, record_path, series_path, checkpoint_dir, recipe,
                      dict(data_spec), dev, Path(root), rank, world, per_rank, worth_compiling(dev, texts))
    finally:
        if handler is not None:
            logging.getLogger("splade_rescale").removeHandler(handler)
            handler.close()


def _train(init_dir: Path, final_dir: Path, log_csv: Path, record_path: Path, series_path: Path,
           checkpoint_dir: Path, recipe: dict[str, Any], data_spec: dict[str, Any], dev: torch.device, root: Path,
           rank: int, world: int, per_rank: int, compile_backbone: bool) -> dict[str, Any]:
    started = time.perf_counter()
    random.seed(recipe["seed"])
    torch.manual_seed(recipe["seed"])
    model, _ = load_masked_lm(init_dir)  # fp32 master weights whatever the checkpoint's dtype
    tokenizer = AutoTokenizer.from_pretrained(str(init_dir))
    encoder = SpladeEncoder(model, tokenizer, head=recipe["head"], chunk_size=recipe["chunk_size"],
                            precision=recipe["precision"]).to(dev)
    if compile_backbone:
        encoder.compile_backbone()  # forward and backward; a long run on CUDA
    encoder.train()
    optimizer, scheduler = _optimizer(encoder, recipe)
    params = [p for p in encoder.parameters() if p.requires_grad]

    step, elapsed_before = 0, 0.0
    series: list[tuple[int, float, float]] = []  # (step, mean non-zeros per query, per document), every step
    fingerprint = run_fingerprint(init_dir, recipe, data_spec, uses_bf16(dev, recipe["precision"]), root)
    state = _resume(checkpoint_dir, fingerprint, encoder, optimizer, scheduler, rank, world)
    if state is not None:
        step, elapsed_before = state["step"], state["elapsed_s"]
        series = [tuple(row) for row in state["sparsity_series"]]
        log.info("resumed from %s at step %d", checkpoint_dir, step)
    if rank == 0:
        _start_log(log_csv, state["log_csv"] if state is not None else _LOG_HEADER)
    log.info("training %s -> %s: recipe %s, %d steps, %d processes, device %s",
             init_dir, final_dir, recipe.get("name", "?"), recipe["steps"], world, dev)

    accum = recipe["grad_accumulation"]
    micro_global = recipe["batch_size"] // accum
    stream = training_stream(data_spec, recipe, start=step * recipe["batch_size"], root=root)
    batches = _batches(stream, micro_global, recipe["negatives_per_query"])
    vocab = encoder.vocab_size
    status, reason, collapse_step = "ok", None, None
    last_row: dict[str, Any] = {}
    t_start = time.perf_counter()
    bar = tqdm(total=recipe["steps"], initial=step, disable=rank != 0, desc="train", mininterval=5)
    log.info("rank %d/%d: queries [%d, %d) of each micro-batch of %d", rank, world, rank * per_rank,
             (rank + 1) * per_rank, micro_global)
    while step < recipe["steps"]:
        t0 = time.perf_counter()
        lam_q = regulariser_weight(recipe["lambda_q"], step + 1, recipe["flops_warmup_steps"])
        lam_d = regulariser_weight(recipe["lambda_d"], step + 1, recipe["flops_warmup_steps"])
        totals = torch.zeros(len(_STAT_NAMES), device=dev)
        for _ in range(accum):
            batch = next(batches)[rank * per_rank:(rank + 1) * per_rank]
            loss, stats = _micro_step(encoder, batch, recipe, lam_q, lam_d)
            (loss / accum).backward()
            totals += stats / accum
        average_gradients(params)
        if world > 1:
            dist.all_reduce(totals)
            totals /= world
        max_norm = recipe["max_grad_norm"] if recipe["max_grad_norm"] > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        # the step's one host sync: the collapse check needs the loss and norm before the update
        *stats, grad_norm = torch.cat([totals, norm.reshape(1).to(totals)]).tolist()
        values = dict(zip(_STAT_NAMES, stats))
        lr = scheduler.get_last_lr()[0]
        if not (math.isfinite(values["loss"]) and math.isfinite(grad_norm)):
            status, reason, collapse_step = "collapsed", f"non-finite loss ({values['loss']}) or gradient " \
                                                         f"norm ({grad_norm})", step + 1
            optimizer.zero_grad(set_to_none=True)  # keep the last finite weights
        else:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update(1)
        series.append((step, values["nnz_q"], values["nnz_d"]))
        dt = time.perf_counter() - t0
        last_row = {"step": step, "lr": lr, "lambda_q": lam_q, "lambda_d": lam_d, "loss": values["loss"],
                    "loss_rank": values["loss_rank"], "loss_flops_q": lam_q * values["flops_q"],
                    "loss_flops_d": lam_d * values["flops_d"], "flops_q": values["flops_q"],
                    "flops_d": values["flops_d"], "nnz_q": values["nnz_q"], "nnz_d": values["nnz_d"],
                    "max_weight": values["max_weight"], "mean_weight": values["mean_weight"],
                    "grad_norm": grad_norm, "queries_per_s": recipe["batch_size"] / dt,
                    "elapsed_s": elapsed_before + time.perf_counter() - t_start}
        if rank == 0 and (step % recipe["log_every"] == 0 or step == recipe["steps"] or status != "ok"):
            _append_log(log_csv, last_row)
            log.info("step %d: %s", step, " ".join(f"{k}={v:.4g}" for k, v in last_row.items() if k != "step"))
        if status != "ok":
            log.warning("stopped at step %d: %s", collapse_step, reason)
            break
        if step % recipe["checkpoint_every"] == 0 and step < recipe["steps"]:
            rng = _rng_states(world)  # all ranks take part
            if rank == 0:
                _save_checkpoint(checkpoint_dir, {
                    "step": step, "examples_seen": step * recipe["batch_size"], "recipe": recipe,
                    "model": encoder.model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "rng": rng, "sparsity_series": series,
                    "fingerprint": fingerprint, "elapsed_s": last_row["elapsed_s"],
                    "log_csv": log_csv.read_bytes().decode()}, recipe["keep_checkpoints"])
            if world > 1:  # the others wait for the save here, not in the next step's all-reduce
                dist.barrier()
    bar.close()
    record = {"status": status, "reason": reason, "verdict": "non-finite loss or gradient" if reason else None,
              "collapse_step": collapse_step, "steps_done": step, "steps_planned": recipe["steps"],
              "recipe": training_recipe(recipe), "data": data_spec, "vocab_size": vocab,
              "init_dir": str(init_dir), "final_dir": str(final_dir), "device": str(dev), "world_size": world,
              "dtype": weights_dtype(encoder.model),  # master weights; bf16 only through autocast
              "bf16_autocast": fingerprint["bf16_autocast"], "compiled_backbone": encoder.compiled,
              "head": recipe["head"], "last_log": last_row,
              "logit_shift": encoder.logit_shift,  # final/ carries it in its decoder bias
              "wall_s_this_run": time.perf_counter() - started,
              "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__}}
    if rank == 0:
        _write_final(encoder, final_dir, recipe["doc_max_length"])
        write_text(series_path, series_csv(series))
        write_json(record_path, record)
        # the final model and the record now hold everything; checkpoints (model + AdamW state,
        # ~0.4 GB each for MiniLM, several GB for large backbones) only served resumption
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
        log.info("finished: status %s after %d steps (%s)", status, step, reason or "no non-finite stop")
    return record


# ---------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> None:
    """``python -m splade_rescale.training.train`` (or under ``torchrun``): one training run."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("init-dir", "final-dir", "log-csv", "record", "checkpoint-dir"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--recipe-json", required=True, help="resolved recipe (resolve_recipe) as JSON")
    p.add_argument("--data-json", required=True, help="training.data spec as JSON")
    p.add_argument("--device", default="auto")
    p.add_argument("--root", default=".")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    record = run_training(a.init_dir, a.final_dir, a.log_csv, a.record, a.checkpoint_dir,
                          json.loads(a.recipe_json), json.loads(a.data_json), device=a.device, root=a.root)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    print(json.dumps({"status": record["status"], "steps_done": record["steps_done"]}))


if __name__ == "__main__":
    main()
