"""SPLADE max-pooling over an MLM head without materialising B x L x V logits.

SPLADE's representation is ``rep[b, v] = max_l log1p(relu(logit[b, l, v]))`` over
real (mask == 1) tokens. Computing it naively holds the whole B x L x V logits
tensor (3.3 GB in bf16 at 256 x 128 x 50,368) plus its autograd copies. The fused
version walks the vocabulary in chunks, keeps only the B x V max logits and the
argmax token index, and in backward routes each gradient to its argmax token,
so peak extra memory is O(B * L * chunk_size).

``log1p(relu(.))`` is monotone non-decreasing, so the max over tokens commutes with
it: we reduce the raw logits (padding filled with -inf) and apply relu/log1p to the
B x V maxima only. ``relu(-inf) == 0`` reproduces naive's "padding contributes 0".

Both take a logit ``shift`` s (``log1p(relu(x - s))``, the activation shift of the
``logit_shift`` variants): subtracting a constant commutes with the max too, so the fused
head shifts the maxima. ``shift == 0`` skips the subtraction: the plain activation, bit for bit.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["naive_splade_pool", "fused_splade_pool"]


def naive_splade_pool(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    attention_mask: Tensor | None,
    shift: float = 0.0,
) -> Tensor:
    """Plain SPLADE pooling, the one the fused head is checked against; materialises the full B x L x V logits.

    ``F.linear`` (not ``hidden @ weight.T + bias``) so that under autocast the bias
    is added in the low-precision dtype, exactly like an ``nn.Linear`` decoder.
    """
    logits = F.linear(hidden, weight, bias)
    if shift:
        logits = logits - shift
    act = torch.log1p(torch.relu(logits))
    if attention_mask is not None:
        act = act.masked_fill(~attention_mask.bool().unsqueeze(-1), 0.0)
    return act.max(dim=1).values


def _dtypes(hidden: Tensor, weight: Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(matmul dtype, output dtype) that ``naive_splade_pool`` would use here.

    Mirrors autocast's F.linear cast (float64 is not autocast-eligible) and probes
    relu/log1p on an empty tensor so the output dtype follows autocast's op lists
    (CUDA autocast runs log1p in fp32; CPU autocast does not).
    """
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type) and hidden.dtype != torch.float64:
        compute = torch.get_autocast_dtype(device_type)
    else:
        compute = hidden.dtype
    probe = torch.empty(0, dtype=compute, device=hidden.device)
    out = torch.log1p(torch.relu(probe)).dtype
    return compute, out


def _no_autocast(device_type: str) -> contextlib.AbstractContextManager[Any]:
    """Disable autocast inside the Function: every cast below is explicit."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def _check_inputs(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, attention_mask: Tensor | None, chunk_size: int
) -> None:
    if hidden.dim() != 3:
        raise ValueError(f"hidden must be B x L x H, got shape {tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[2]:
        raise ValueError(f"weight must be V x H={hidden.shape[2]}, got shape {tuple(weight.shape)}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"bias must have shape ({weight.shape[0]},), got {tuple(bias.shape)}")
    if attention_mask is not None and attention_mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"attention_mask must be B x L={tuple(hidden.shape[:2])}, got {tuple(attention_mask.shape)}"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")


def _max_logits(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    pad: Tensor | None,
    chunk_size: int,
    compute: torch.dtype,
    with_argmax: bool,
) -> tuple[Tensor, Tensor | None]:
    """Masked max over tokens of the logits, one vocabulary chunk at a time.

    Returns the B x V max logits (``compute`` dtype; -inf where a row has no real
    token) and, if asked, the B x V int32 token index of the max (first on ties).
    """
    batch, _, _ = hidden.shape
    vocab = weight.shape[0]
    h = hidden.to(compute)
    max_logit = torch.empty(batch, vocab, dtype=compute, device=hidden.device)
    argmax = torch.empty(batch, vocab, dtype=torch.int32, device=hidden.device) if with_argmax else None
    pad3 = pad.unsqueeze(-1) if pad is not None else None
    for v0 in range(0, vocab, chunk_size):
        v1 = min(v0 + chunk_size, vocab)
        b_c = bias[v0:v1].to(compute) if bias is not None else None
        logits = F.linear(h, weight[v0:v1].to(compute), b_c)  # B x L x chunk, freed each step
        if pad3 is not None:
            logits.masked_fill_(pad3, float("-inf"))
        if argmax is not None:
            vals, idx = logits.max(dim=1)
            max_logit[:, v0:v1] = vals
            argmax[:, v0:v1] = idx
        else:
            max_logit[:, v0:v1] = logits.amax(dim=1)
        del logits
    return max_logit, argmax


class _FusedSpladePool(torch.autograd.Function):
    """Chunked forward; backward sends each (b, v) gradient to its argmax token only."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        pad: Tensor | None,
        chunk_size: int,
        compute: torch.dtype,
        out_dtype: torch.dtype,
        shift: float,
    ) -> Tensor:
        with _no_autocast(hidden.device.type):
            max_logit, argmax = _max_logits(hidden, weight, bias, pad, chunk_size, compute, True)
            if shift:
                max_logit = max_logit - shift
            out = torch.log1p(torch.relu(max_logit).to(out_dtype))
        ctx.save_for_backward(hidden, weight, max_logit, argmax)
        ctx.chunk_size = chunk_size
        ctx.compute = compute
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        hidden, weight, max_logit, argmax = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        chunk_size: int = ctx.chunk_size
        compute: torch.dtype = ctx.compute
        grad_h = grad_w = grad_b = None
        with _no_autocast(hidden.device.type):
            # d/dx log1p(relu(x)) at the (shifted) max logit x; zero where relu is inactive
            # (covers all-negative and fully padded rows, where x may be -inf).
            x = max_logit.float()
            dlogit = torch.where(x > 0, grad_out.float() / (1.0 + x), torch.zeros_like(x))
            if need_b:
                grad_b = dlogit.sum(dim=0).to(ctx.bias_dtype)
            if need_h or need_w:
                batch, seq, dim = hidden.shape
                vocab = weight.shape[0]
                h_flat = hidden.to(compute).reshape(batch * seq, dim)
                acc_h = torch.zeros(batch * seq, dim, dtype=torch.float32, device=hidden.device) if need_h else None
                if need_w:
                    grad_w = torch.empty_like(weight)
                for v0 in range(0, vocab, chunk_size):
                    v1 = min(v0 + chunk_size, vocab)
                    # One nonzero per (b, v) column: a B x L x chunk scatter turns both
                    # gradients into plain GEMMs (tensor-core friendly), and is no
                    # bigger than the forward's per-chunk logits. Gathering hidden rows
                    # instead would be B x chunk x H, which is larger whenever H > L.
                    d = torch.zeros(batch, seq, v1 - v0, dtype=compute, device=hidden.device)
                    d.scatter_(1, argmax[:, v0:v1].long().unsqueeze(1), dlogit[:, v0:v1].to(compute).unsqueeze(1))
                    d_flat = d.view(batch * seq, v1 - v0)
                    if acc_h is not None:
                        w_c = weight[v0:v1].to(compute)
                        if compute == torch.float32:
                            acc_h.addmm_(d_flat, w_c)
                        else:
                            acc_h += (d_flat @ w_c).float()
                    if grad_w is not None:
                        grad_w[v0:v1] = (d_flat.t() @ h_flat).to(weight.dtype)
                    del d, d_flat
                if acc_h is not None:
                    grad_h = acc_h.view(batch, seq, dim).to(hidden.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None, None


def fused_splade_pool(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    attention_mask: Tensor | None,
    chunk_size: int = 4096,
    shift: float = 0.0,
) -> Tensor:
    """Same result as ``naive_splade_pool`` with O(B * L * chunk_size) extra memory.

    ``hidden``: B x L x H transformed hidden states; ``weight``: V x H decoder;
    ``bias``: V or None; ``attention_mask``: B x L (nonzero = real token) or None.
    Under autocast the chunk matmuls run in the autocast dtype and the output dtype
    matches naive's; gradients come back in each input's own dtype. Without
    autograd (no_grad, or nothing requires grad) argmax is not computed or saved.
    """
    _check_inputs(hidden, weight, bias, attention_mask, chunk_size)
    compute, out_dtype = _dtypes(hidden, weight)
    pad = None if attention_mask is None else ~attention_mask.bool()
    needs_grad = torch.is_grad_enabled() and (
        hidden.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    if needs_grad:
        out: Tensor = _FusedSpladePool.apply(hidden, weight, bias, pad, chunk_size, compute, out_dtype, shift)
        return out
    with torch.no_grad(), _no_autocast(hidden.device.type):
        max_logit, _ = _max_logits(hidden, weight, bias, pad, chunk_size, compute, False)
        if shift:
            max_logit = max_logit - shift
        return torch.log1p(torch.relu(max_logit).to(out_dtype))
