"""Losses: FLOPS, quadratic warm-up, contrastive/distillation values, and the multi-process FLOPS."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from splade_rescale.model.losses import (
    average_gradients,
    contrastive_loss,
    flops_regulariser,
    gather_rows,
    kl_loss,
    margin_mse_loss,
    regulariser_weight,
)


def test_flops_regulariser_is_sum_of_squared_batch_means() -> None:
    reps = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    assert flops_regulariser(reps).item() == pytest.approx(2.0**2 + 0.0 + 1.0**2)


def test_quadratic_warmup() -> None:
    assert regulariser_weight(0.4, 0, 100) == 0.0
    assert regulariser_weight(0.4, 50, 100) == pytest.approx(0.1)
    assert regulariser_weight(0.4, 100, 100) == pytest.approx(0.4)
    assert regulariser_weight(0.4, 5000, 100) == pytest.approx(0.4)
    assert regulariser_weight(0.4, 3, 0) == 0.4


def test_contrastive_is_cross_entropy_over_all_documents() -> None:
    g = torch.Generator().manual_seed(0)
    q, docs = torch.rand(3, 7, generator=g), torch.rand(9, 7, generator=g)  # 3 positives + 6 negatives
    expected = F.cross_entropy(q @ docs.t() / 0.5, torch.arange(3))
    assert contrastive_loss(q, docs, temperature=0.5).item() == pytest.approx(expected.item(), rel=1e-6)


def test_distillation_losses() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    docs = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 0.0], [0.0, 1.0]])  # pos, pos, neg(q0), neg(q1)
    student = torch.tensor([[2.0, 1.0], [3.0, 1.0]])
    teacher = torch.tensor([[5.0, 5.0], [1.0, 0.0]])
    assert margin_mse_loss(q, docs, teacher).item() == pytest.approx(((1 - 0) ** 2 + (2 - 1) ** 2) / 2)
    expected = F.kl_div(F.log_softmax(student, 1), F.softmax(teacher, 1), reduction="batchmean")
    assert kl_loss(q, docs, teacher).item() == pytest.approx(expected.item(), rel=1e-6)


def _toy_problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(5, 11, generator=g), torch.randn(4, 5, generator=g), torch.randn(8, 5, generator=g)


def _loss(weight: torch.Tensor, q_in: torch.Tensor, d_in: torch.Tensor) -> torch.Tensor:
    """Local queries vs gathered documents + FLOPS of the gathered queries and documents."""
    q, d = torch.relu(q_in @ weight), torch.relu(d_in @ weight)
    d_all, offset = gather_rows(d)
    q_all, _ = gather_rows(q)
    return contrastive_loss(q, d_all, 1.0, offset) + 0.3 * flops_regulariser(q_all) + 0.7 * flops_regulariser(d_all)


def _worker(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    weight0, q_in, d_in = _toy_problem()
    weight = weight0.clone().requires_grad_()
    q_local, d_local = q_in[2 * rank:2 * rank + 2], d_in[4 * rank:4 * rank + 4]
    # Global FLOPS value on the gathered batch ...
    value = flops_regulariser(gather_rows(torch.relu(q_local @ weight))[0]).item()
    # ... and the gradient of the whole objective, averaged over ranks as the trainer does.
    _loss(weight, q_local, d_local).backward()
    average_gradients([weight])  # type: ignore[list-item]
    out[rank] = (value, weight.grad.clone())
    dist.destroy_process_group()


def test_two_process_flops_and_gradient_match_one_process() -> None:
    weight0, q_in, d_in = _toy_problem()
    # One process over the concatenated batch, documents ordered as gathered: rank 0's rows, rank 1's rows.
    weight = weight0.clone().requires_grad_()
    single_value = flops_regulariser(torch.relu(q_in @ weight)).item()
    q, d = torch.relu(q_in @ weight), torch.relu(d_in @ weight)
    # Rank r holds queries 2r, 2r+1 and documents 4r..4r+3 (its positives are the first two);
    # the mean of the per-rank contrastive losses is the loss over all queries.
    ce0 = contrastive_loss(q[:2], d, 1.0, 0)
    ce1 = contrastive_loss(q[2:], d, 1.0, 4)
    loss = (ce0 + ce1) / 2 + 0.3 * flops_regulariser(q) + 0.7 * flops_regulariser(d)
    loss.backward()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.get_context("spawn").Manager()
    out = manager.dict()
    mp.start_processes(_worker, args=(port, out), nprocs=2, start_method="spawn")
    for rank in (0, 1):
        value, grad = out[rank]
        assert value == pytest.approx(single_value, rel=1e-6)
        torch.testing.assert_close(grad, weight.grad, rtol=1e-5, atol=1e-6)
