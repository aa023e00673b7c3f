"""The fused chunked SPLADE head must match the naive one in values and gradients."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from splade_rescale.model.fused_head import fused_splade_pool, naive_splade_pool

B, L, H, V, CHUNK = 3, 7, 16, 50, 16  # V is not a multiple of CHUNK


def _inputs(
    seed: int = 0, dtype: torch.dtype = torch.float32, with_bias: bool = True
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L, H, generator=g, dtype=dtype, requires_grad=True)
    weight = (torch.randn(V, H, generator=g, dtype=dtype) / H**0.5).requires_grad_()
    bias = (0.3 * torch.randn(V, generator=g, dtype=dtype)).requires_grad_() if with_bias else None
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 2:] = 0  # a row with only two real tokens
    mask[2, 5:] = 0
    return hidden, weight, bias, mask


def _grads(out: Tensor, upstream: Tensor, params: list[Tensor]) -> tuple[Tensor, ...]:
    return torch.autograd.grad(out, params, upstream)


@pytest.mark.parametrize("with_bias", [True, False])
def test_forward_matches_naive_with_padding(with_bias: bool) -> None:
    hidden, weight, bias, mask = _inputs(with_bias=with_bias)
    ref = naive_splade_pool(hidden, weight, bias, mask)
    out = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    assert out.shape == (B, V) and out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    assert (out > 0).any() and (out == 0).any()  # both relu branches exercised
    # Padding really is excluded: token values past the mask would change the result.
    hidden2 = hidden.detach().clone()
    hidden2[1, 2:] = 100.0
    torch.testing.assert_close(fused_splade_pool(hidden2, weight, bias, mask, chunk_size=CHUNK), out.detach())


def test_forward_without_mask_and_chunk_sizes() -> None:
    hidden, weight, bias, _ = _inputs(seed=1)
    ref = naive_splade_pool(hidden, weight, bias, None)
    for chunk in (1, 7, 50, 4096):
        out = fused_splade_pool(hidden, weight, bias, None, chunk_size=chunk)
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("with_bias", [True, False])
def test_gradients_match_naive(with_bias: bool) -> None:
    hidden, weight, bias, mask = _inputs(seed=2, with_bias=with_bias)
    params = [hidden, weight] + ([bias] if bias is not None else [])
    upstream = torch.randn(B, V, generator=torch.Generator().manual_seed(3))
    ref = _grads(naive_splade_pool(hidden, weight, bias, mask), upstream, params)
    got = _grads(fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK), upstream, params)
    for r, g in zip(ref, got, strict=True):
        assert g.dtype == r.dtype and g.shape == r.shape
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)
    assert got[0][1, 2:].abs().max() == 0  # no gradient to padding


def test_partial_requires_grad() -> None:
    """Frozen decoder (weight/bias without grad) still gives the hidden gradient."""
    hidden, weight, bias, mask = _inputs(seed=4)
    weight, bias = weight.detach(), bias.detach() if bias is not None else None
    upstream = torch.randn(B, V, generator=torch.Generator().manual_seed(5))
    (ref,) = _grads(naive_splade_pool(hidden, weight, bias, mask), upstream, [hidden])
    (got,) = _grads(fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK), upstream, [hidden])
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    # Only the decoder trainable (hidden frozen).
    hidden2, weight2, bias2, _ = _inputs(seed=4)
    hidden2 = hidden2.detach()
    assert bias2 is not None
    ref_w = _grads(naive_splade_pool(hidden2, weight2, bias2, mask), upstream, [weight2, bias2])
    got_w = _grads(fused_splade_pool(hidden2, weight2, bias2, mask, chunk_size=CHUNK), upstream, [weight2, bias2])
    for r, g in zip(ref_w, got_w, strict=True):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


def test_ties_values_and_gradient_mass() -> None:
    hidden, weight, bias, mask = _inputs(seed=6)
    with torch.no_grad():
        hidden[:, 3] = hidden[:, 1]  # exact duplicate tokens: every max over them is tied
        hidden[0, 5] = hidden[0, 1]
    mask = torch.ones(B, L, dtype=torch.long)
    upstream = torch.randn(B, V, generator=torch.Generator().manual_seed(7))
    params = [hidden, weight, bias]
    ref_out = naive_splade_pool(hidden, weight, bias, mask)
    out = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=0)
    ref = _grads(ref_out, upstream, params)  # type: ignore[arg-type]
    got = _grads(out, upstream, params)  # type: ignore[arg-type]
    # Which duplicate gets the gradient is an implementation choice; the total is not.
    torch.testing.assert_close(got[0].sum(dim=1), ref[0].sum(dim=1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], ref[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[2], ref[2], atol=1e-5, rtol=1e-5)
    # Ties go to the first tied token, so later duplicates get no gradient.
    assert got[0][:, 1].abs().sum() > 0
    assert got[0][:, 3].abs().max() == 0 and got[0][0, 5].abs().max() == 0


def test_all_negative_logits_give_zero_and_zero_grads() -> None:
    hidden, weight, bias, mask = _inputs(seed=8)
    with torch.no_grad():
        bias.fill_(-1e3)  # type: ignore[union-attr]
    out = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    assert torch.equal(out, torch.zeros(B, V))
    grads = _grads(out, torch.randn(B, V), [hidden, weight, bias])  # type: ignore[list-item]
    for g in grads:
        assert torch.equal(g, torch.zeros_like(g))


def test_fully_padded_row_is_zero() -> None:
    hidden, weight, bias, mask = _inputs(seed=9)
    mask[0] = 0
    out = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    torch.testing.assert_close(out, naive_splade_pool(hidden, weight, bias, mask), atol=1e-6, rtol=0)
    assert torch.equal(out[0], torch.zeros(V))
    (gh,) = _grads(out, torch.ones(B, V), [hidden])
    assert torch.isfinite(gh).all() and gh[0].abs().max() == 0


def test_gradcheck_float64() -> None:
    g = torch.Generator().manual_seed(10)
    hidden = torch.randn(2, 4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 5, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(11, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])

    def fn(h: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return fused_splade_pool(h, w, b, mask, chunk_size=4)

    assert torch.autograd.gradcheck(fn, (hidden, weight, bias), eps=1e-6, atol=1e-6)


def test_no_grad_path_matches() -> None:
    hidden, weight, bias, mask = _inputs(seed=11)
    with_grad = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    with torch.no_grad():
        no_grad = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    assert not no_grad.requires_grad
    torch.testing.assert_close(no_grad, with_grad.detach(), atol=0, rtol=0)


def test_bfloat16_inputs_cpu() -> None:
    hidden, weight, bias, mask = _inputs(seed=12, dtype=torch.bfloat16)
    ref = naive_splade_pool(hidden, weight, bias, mask)
    out = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    assert out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    upstream = torch.randn(B, V, dtype=torch.bfloat16)
    ref_g = _grads(ref, upstream, [hidden, weight, bias])  # type: ignore[list-item]
    got_g = _grads(out, upstream, [hidden, weight, bias])  # type: ignore[list-item]
    for r, g in zip(ref_g, got_g, strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), r.float(), atol=5e-2, rtol=5e-2)


def test_cpu_autocast_bfloat16() -> None:
    """fp32 master params under autocast: low-precision compute, fp32 gradients."""
    hidden, weight, bias, mask = _inputs(seed=13)
    upstream = torch.randn(B, V)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = naive_splade_pool(hidden, weight, bias, mask)
        out = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
    ref_g = _grads(ref, upstream.to(ref.dtype), [hidden, weight, bias])  # type: ignore[list-item]
    got_g = _grads(out, upstream.to(out.dtype), [hidden, weight, bias])  # type: ignore[list-item]
    for r, g in zip(ref_g, got_g, strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, r, atol=5e-2, rtol=5e-2)


class _MaxNumel(TorchDispatchMode):
    """Records the largest tensor any aten op produces (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, Tensor):
                self.max_numel = max(self.max_numel, t.numel())
        return out


def test_never_materialises_full_logits() -> None:
    b, length, h, v, chunk = 3, 7, 8, 50, 16
    g = torch.Generator().manual_seed(14)
    hidden = torch.randn(b, length, h, generator=g, requires_grad=True)
    weight = torch.randn(v, h, generator=g, requires_grad=True)
    bias = torch.randn(v, generator=g, requires_grad=True)
    mask = torch.ones(b, length, dtype=torch.long)
    bound = max(b * length * chunk, b * length * h, v * h, b * v)
    assert bound < b * length * v
    with _MaxNumel() as mode:
        out = fused_splade_pool(hidden, weight, bias, mask, chunk_size=chunk)
        torch.autograd.grad(out, [hidden, weight, bias], torch.randn(b, v))
    assert 0 < mode.max_numel <= bound
    with _MaxNumel() as naive_mode:  # the probe does see naive's B x L x V tensor
        naive_splade_pool(hidden, weight, bias, mask)
    assert naive_mode.max_numel == b * length * v


def test_rejects_bad_shapes() -> None:
    hidden, weight, bias, mask = _inputs()
    with pytest.raises(ValueError):
        fused_splade_pool(hidden, weight[:, :-1], bias, mask)
    with pytest.raises(ValueError):
        fused_splade_pool(hidden, weight, bias, mask[:, :-1])
    with pytest.raises(ValueError):
        fused_splade_pool(hidden, weight, bias, mask, chunk_size=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_autocast_matches_naive(dtype: torch.dtype) -> None:
    cpu_hidden, cpu_weight, cpu_bias, cpu_mask = _inputs(seed=15)
    assert cpu_bias is not None
    hidden = cpu_hidden.detach().cuda().requires_grad_()
    weight = cpu_weight.detach().cuda().requires_grad_()
    bias = cpu_bias.detach().cuda().requires_grad_()
    mask = cpu_mask.cuda()
    upstream = torch.randn(B, V, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        ref = naive_splade_pool(hidden, weight, bias, mask)
        out = fused_splade_pool(hidden, weight, bias, mask, chunk_size=CHUNK)
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
    ref_g = _grads(ref, upstream.to(ref.dtype), [hidden, weight, bias])
    got_g = _grads(out, upstream.to(out.dtype), [hidden, weight, bias])
    for r, g in zip(ref_g, got_g, strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, r, atol=5e-2, rtol=5e-2)
