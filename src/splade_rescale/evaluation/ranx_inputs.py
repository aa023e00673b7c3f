"""ranx's metric inputs built directly: per query, (document code, grade) and (document code, score) rows.

``ranx.Qrels``/``Run`` compile numba functions for each string width of the ids they are given:
tens of seconds per new width in a fresh environment (docs/measurements.md), so every new
collection's id lengths cost a compile, and the paper run
pays one per BEIR collection on every fresh node. They also match documents by a float of each id's
hash. Here the codes are exact integers shared by qrels and run, and one numba function with a
fixed signature, cached on disk, builds the typed lists that ranx's metric kernels read.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from numba import njit
from numba.typed import List


def ranx_lists(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
               qids: Sequence[str]) -> tuple[List, List]:
    """(qrels, run) typed lists for ``qids``, in that order, each query's rows sorted by their second
    column descending (as ranx's ``Qrels``/``Run`` hand them to its metrics). Every query of ``qids``
    must be in both."""
    codes: dict[str, int] = {}
    qrels_rows, run_rows = [], []
    for q in qids:
        judged = sorted(qrels[q].items(), key=lambda h: h[1], reverse=True)
        hits = sorted(run[q].items(), key=lambda h: h[1], reverse=True)
        qrels_rows.append([(codes.setdefault(d, len(codes)), g) for d, g in judged])
        run_rows.append([(codes.setdefault(d, len(codes)), s) for d, s in hits])
    return _typed_list(qrels_rows), _typed_list(run_rows)


def _typed_list(rows: list[list[tuple[int, float]]]) -> List:
    flat = np.array([r for query in rows for r in query], dtype=np.float64).reshape(-1, 2)
    offsets = np.cumsum([0] + [len(query) for query in rows]).astype(np.int64)
    return _split(flat, offsets)


@njit(cache=True)
def _split(flat: np.ndarray, offsets: np.ndarray) -> List:
    out = List()
    for i in range(len(offsets) - 1):
        out.append(flat[offsets[i]:offsets[i + 1]].copy())
    return out
