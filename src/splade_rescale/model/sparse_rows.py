"""Quantised SPLADE vectors as CSR rows: what the device hands the host.

A SPLADE batch is B x V on the device (51.6 MB for 256 documents of a 50,368-term head), but only
~1% of it is non-zero. :func:`sparsify` rounds, prunes and extracts the non-zeros where the model
runs, so the host receives term ids and integer weights only (a few hundred KB a batch) and never
scans the dense tensor. NaN or inf weights stop the encode (:class:`NonFiniteWeights`): rounded and
cast they would become weight 0 or -2^31, or a line-writer table of 2^31 entries.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class SparseRows(NamedTuple):
    """Rows of quantised weights: row i's term ids are ``terms[indptr[i]:indptr[i + 1]]``
    (ascending) and its weights the same slice of ``weights`` (all > 0)."""

    indptr: np.ndarray  # int64, rows + 1
    terms: np.ndarray  # int32
    weights: np.ndarray  # int32

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    def row(self, i: int) -> dict[str, int]:
        """Row ``i`` as ``{token_id: weight}`` (the JSON vector's content)."""
        a, b = self.indptr[i], self.indptr[i + 1]
        return dict(zip(map(str, self.terms[a:b].tolist()), self.weights[a:b].tolist()))


class NonFiniteWeights(ValueError):
    """NaN or inf among the SPLADE weights; ``row``: the first such row of the batch (or of the texts, or
    ``item``, the document or query id, as the callers that know them fill in)."""

    def __init__(self, row: int, value: float, item: str | None = None) -> None:
        where = f"{item!r}" if item is not None else f"row {row}"
        super().__init__(f"non-finite SPLADE weight ({value}) for {where}")
        self.row, self.value, self.item = row, value, item


def prune(reps: torch.Tensor, max_active_dims: int | None) -> torch.Tensor:
    """Keep each row's ``max_active_dims`` largest weights (None: keep all)."""
    if not max_active_dims or reps.shape[-1] <= max_active_dims:
        return reps
    values, idx = reps.topk(max_active_dims, dim=-1)
    return torch.zeros_like(reps).scatter_(-1, idx, values)


def sparsify(reps: torch.Tensor, quantization: float, max_active_dims: int | None = None) -> SparseRows:
    """B x V SPLADE weights (any device) -> host CSR of ``round(w * quantization)`` without zeros.

    Pruning, rounding and the non-zero scan run on ``reps``'s device; only the non-zeros are copied.
    """
    q = torch.round(prune(reps.float(), max_active_dims) * quantization)
    finite, negative = torch.isfinite(q).all(), (q < 0).any()
    nz = q.nonzero()  # row-major: rows ascending, term ids ascending within a row
    if not bool(finite):
        row = int((~torch.isfinite(q)).any(dim=1).nonzero()[0, 0])
        raise NonFiniteWeights(row, float(q[row][~torch.isfinite(q[row])][0]))
    if bool(negative):
        raise ValueError("negative SPLADE weights: the encoder must end with log(1 + relu(.))")
    rows, cols = nz[:, 0], nz[:, 1]
    counts = torch.bincount(rows, minlength=q.shape[0])
    indptr = np.zeros(q.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts.cpu().numpy(), out=indptr[1:])
    return SparseRows(indptr, cols.to(torch.int32).cpu().numpy(), q[rows, cols].to(torch.int32).cpu().numpy())
