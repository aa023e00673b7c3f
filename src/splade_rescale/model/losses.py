"""SPLADE training objectives: ranking loss (contrastive or distillation) + FLOPS regularisers.

All functions take SPLADE vectors (rows = texts, columns = vocabulary). Documents are laid
out as ``[positives (B), negatives of query 0 (n), negatives of query 1 (n), ...]`` so that
row ``i`` of the positives belongs to query ``i``.

Multi-GPU: :func:`gather_rows` concatenates every rank's rows with an autograd-aware
all-gather. Computing FLOPS on the gathered batch on each rank, then averaging the
gradients over ranks, gives exactly the single-process gradient of the global-batch FLOPS.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor


def flops_regulariser(reps: Tensor) -> Tensor:
    """FLOPS regulariser (Paria et al. 2020): sum_v (mean over the batch of |w_v|)^2."""
    return reps.abs().mean(dim=0).pow(2).sum()


def regulariser_weight(lam: float, step: int, warmup_steps: int) -> float:
    """SPLADE's quadratic warm-up: lambda_t = lambda * min(1, (t / T)^2); T = 0 disables it."""
    if warmup_steps <= 0:
        return lam
    return lam * min(1.0, (step / warmup_steps) ** 2)


def gather_rows(x: Tensor) -> tuple[Tensor, int]:
    """(all ranks' rows concatenated in rank order, offset of this rank's rows); identity off DDP.

    Uses ``torch.distributed.nn.functional.all_gather`` so gradients flow back to every
    rank's own rows (a plain ``dist.all_gather`` would cut the graph).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x, 0
    from torch.distributed.nn.functional import all_gather

    parts = all_gather(x)
    return torch.cat(parts, dim=0), dist.get_rank() * x.shape[0]


def average_gradients(params: list[torch.nn.Parameter]) -> None:
    """All-reduce gradients and divide by the world size (what DDP does), in one flat bucket."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for g, synced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
        g.copy_(synced)


def contrastive_loss(queries: Tensor, docs: Tensor, temperature: float = 1.0, query_offset: int = 0) -> Tensor:
    """InfoNCE of each query against all documents (its positive, in-batch and hard negatives).

    ``docs`` may be the gathered global batch; ``query_offset`` is then the index of this
    rank's first positive in it. Dot-product scores divided by ``temperature``.
    """
    scores = queries.float() @ docs.float().t() / temperature
    labels = torch.arange(queries.shape[0], device=queries.device) + query_offset
    return F.cross_entropy(scores, labels)


def _pair_scores(queries: Tensor, docs: Tensor) -> Tensor:
    """B x (1 + n) scores of each query with its own positive and hard negatives."""
    b = queries.shape[0]
    own = torch.cat([docs[:b].unsqueeze(1), docs[b:].view(b, -1, docs.shape[1])], dim=1)
    return torch.einsum("bv,bkv->bk", queries.float(), own.float())


def margin_mse_loss(queries: Tensor, docs: Tensor, teacher: Tensor) -> Tensor:
    """MarginMSE (Hofstätter et al.): MSE between student and teacher pos-neg margins.

    ``teacher``: B x (1 + n) teacher scores, positive first.
    """
    student = _pair_scores(queries, docs)
    s_margin = student[:, :1] - student[:, 1:]
    t_margin = teacher[:, :1] - teacher[:, 1:]
    return F.mse_loss(s_margin, t_margin.to(s_margin))


def kl_loss(queries: Tensor, docs: Tensor, teacher: Tensor) -> Tensor:
    """KL(teacher || student) over each query's own positive and hard negatives."""
    student = F.log_softmax(_pair_scores(queries, docs), dim=1)
    target = F.log_softmax(teacher.to(student), dim=1)
    return F.kl_div(student, target, log_target=True, reduction="batchmean")
