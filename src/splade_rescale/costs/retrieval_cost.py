"""Core-seconds of one SPLADE impact search (Lucene, k = 1000, one thread), from the work it does.

The work of a query is the postings it touches: the sum of its terms' document frequencies. Over
a query set and a corpus of N documents that is ``N * sum_t p_q(t) * p_d(t)`` (``p_q``, ``p_d``:
the fractions of queries and of documents holding term t), N times the quantity SPLADE's FLOPS
regulariser penalises; we call ``sum_t p_q(t) p_d(t)`` the postings per query per document. The
cost model is

    seconds = fixed_s + per_term_s * query_nnz + per_posting_s * postings ** gamma

``fixed_s``: what every query pays, mostly its 1,000 hits: at k = 1000 it is about ten times what
it is at k = 10 for the same queries (Anserini's hit objects and their trip to Python through
pyjnius; docs/measurements.md). ``per_term_s``: each term's Java map entry and Lucene scorer. The posting
term may be sublinear (``gamma`` < 1) where Lucene's dynamic pruning (MaxScore once 1,000 hits are
collected) skips more of longer posting lists; the fit says how much (0.84 in the shipped
fit: SPLADE's weights leave little to skip). The coefficients are fitted (:func:`fit`) to
searches timed by benchmarks/bench_retrieval_cost.py on real Lucene indexes; config/throughputs.json
``lucene.impact_search_cost`` ships them.

Before a run the plan knows the corpus size and the kind of query, rarely the model's
densities: :func:`predict` then takes the postings per query per document as ``overlap[kind] *
query_nnz * doc_nnz`` (``overlap`` measured with the fit). A finished encode knows better:
:func:`postings_per_doc` computes the exact figure from the encode stats' document frequencies.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterable, Mapping, Sequence

import numpy as np

GAMMAS = np.round(np.arange(0.20, 1.501, 0.005), 3)  # the exponents :func:`fit` tries


def seconds(coefficients: Mapping[str, float], postings: float | np.ndarray,
            query_nnz: float | np.ndarray) -> float | np.ndarray:
    """Core-seconds of one query that touches ``postings`` postings with ``query_nnz`` terms."""
    c = coefficients
    return (c["fixed_s"] + c["per_term_s"] * np.asarray(query_nnz, dtype=float)
            + c["per_posting_s"] * np.asarray(postings, dtype=float) ** c["gamma"])


def fit(points: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Least relative squared error fit of :func:`seconds` to measured points.

    Each point: ``postings`` (mean per query), ``query_nnz`` (mean), ``seconds`` (core-seconds per
    query) and optionally ``queries`` (its weight). Relative errors, because the points span orders of
    magnitude and the plan needs ratios. The coefficients are kept >= 0 (a cost cannot fall with
    more work): for each ``gamma`` of :data:`GAMMAS`, every subset of the three linear terms that
    keeps the posting term is solved and the best non-negative solution kept.
    """
    pts = list(points)
    if len(pts) < 3:
        raise ValueError(f"fit needs at least 3 points, got {len(pts)}")
    p = np.array([pt["postings"] for pt in pts], dtype=float)
    q = np.array([pt["query_nnz"] for pt in pts], dtype=float)
    y = np.array([pt["seconds"] for pt in pts], dtype=float)
    w = np.sqrt(np.array([pt.get("queries", 1.0) for pt in pts], dtype=float))
    if (p <= 0).any() or (y <= 0).any():
        raise ValueError("fit needs positive postings and seconds")
    best: tuple[float, float, np.ndarray] | None = None
    for gamma in GAMMAS:
        design = np.stack([np.ones_like(p), q, p ** gamma], axis=1) / y[:, None] * w[:, None]
        for keep in itertools.product((True, False), (True, False)):
            cols = [i for i, k in enumerate((*keep, True)) if k]
            beta, *_ = np.linalg.lstsq(design[:, cols], w, rcond=None)
            if (beta < 0).any():
                continue
            full = np.zeros(3)
            full[cols] = beta
            sse = float(np.sum((design @ full - w) ** 2))
            if best is None or sse < best[0]:
                best = (sse, float(gamma), full)
    assert best is not None  # the posting term alone always has a positive solution
    _, gamma, (a, c, b) = best
    out = {"fixed_s": float(a), "per_term_s": float(c), "per_posting_s": float(b), "gamma": gamma}
    out["max_log_residual"] = max_log_error(out, pts)
    return out


def max_log_error(coefficients: Mapping[str, float], points: Iterable[Mapping[str, float]]) -> float:
    """The largest ``|ln(measured / predicted)|`` over ``points`` (as in :func:`fit`)."""
    pts = list(points)
    predicted = seconds(coefficients, [pt["postings"] for pt in pts], [pt["query_nnz"] for pt in pts])
    return float(np.max(np.abs(np.log(np.array([pt["seconds"] for pt in pts]) / predicted))))


def fit_search_cost(groups: Sequence[Mapping], kinds: Sequence[Mapping]) -> dict:
    """The shipped model: :func:`fit` on ``groups`` and a range that covers every error seen.

    ``groups``: timed query groups, each with ``n_docs``, ``kind``, ``doc_nnz`` and the fields
    :func:`fit` reads. ``kinds``: whole query sets (one kind and query size on one index), with
    their mean postings and nnz and their measured mean seconds: what the plan predicts from.
    ``range_factor`` is ``exp`` of the largest of: the fit's residual on any group; the error on
    any whole query set when predicted from its mean postings (a query set's postings spread,
    which a mean hides); and the error on the largest index of a fit made without it (how well
    the model extrapolates in corpus size). :func:`predict` returns central / range_factor and
    central * range_factor. ``overlap[kind]``: the median over that kind's query sets of postings
    per query per document / (query nnz * doc nnz).
    """
    model = fit(groups)
    largest = max(g["n_docs"] for g in groups)
    smaller = [g for g in groups if g["n_docs"] < largest]
    errors = {"groups": model.pop("max_log_residual"), "query_sets": max_log_error(model, kinds)}
    if len({g["n_docs"] for g in smaller}) >= 2:
        errors["extrapolation"] = max_log_error(fit(smaller), [g for g in groups if g["n_docs"] == largest])
    overlap = {}
    for kind in sorted({k["kind"] for k in kinds}):
        ratios = [k["postings"] / (k["n_docs"] * k["query_nnz"] * k["doc_nnz"]) for k in kinds if k["kind"] == kind]
        overlap[kind] = float(np.median(ratios))
    return {**model, "range_factor": round(math.exp(max(errors.values())), 3),
            "range_log_errors": {k: round(v, 4) for k, v in errors.items()}, "overlap": overlap,
            "fitted_docs": [min(g["n_docs"] for g in groups), largest]}


def predict(coefficients: Mapping, n_docs: float, kind: str = "short", *, query_nnz: float | None = None,
            doc_nnz: float | None = None, postings_per_doc: float | None = None) -> tuple[float, float, float]:
    """(central, low, high) core-seconds per query on a corpus of ``n_docs`` documents.

    ``kind``: ``short`` (MS MARCO-like queries, 32 tokens) or ``long`` (BEIR-like, 256 tokens);
    it picks the default ``query_nnz`` and the ``overlap``. ``postings_per_doc``: the measured
    ``sum_t p_q(t) p_d(t)`` of the model on this corpus (:func:`postings_per_doc`), which replaces
    ``overlap[kind] * query_nnz * doc_nnz``. ``doc_nnz`` defaults to the coefficients' ``doc_nnz``.
    """
    c = coefficients
    nnz = float(query_nnz if query_nnz is not None else c["query_nnz"][kind])
    if postings_per_doc is None:
        postings_per_doc = c["overlap"][kind] * nnz * float(doc_nnz if doc_nnz is not None else c["doc_nnz"])
    central = float(seconds(c, n_docs * postings_per_doc, nnz))
    factor = float(c["range_factor"])
    return central, central / factor, central * factor


def expected_postings(doc_df: Mapping[str, int], query_df: Mapping[str, int], n_queries: int) -> float:
    """Mean postings touched per query: ``sum_t (query_df[t] / n_queries) * doc_df[t]``.

    ``doc_df`` / ``query_df``: term -> number of documents / queries holding it (the ``term_df``
    of the encode stats), term keys as strings.
    """
    if n_queries <= 0:
        raise ValueError("expected_postings needs n_queries > 0")
    return sum(count * doc_df.get(str(term), 0) for term, count in query_df.items()) / n_queries


def postings_per_doc(doc_stats: Mapping, query_stats: Mapping) -> float:
    """``sum_t p_q(t) p_d(t)`` from a corpus's and a query set's encode stats JSON (``n_docs``,
    ``n_queries``, ``term_df``): pass it to :func:`predict` once a model's vectors exist."""
    return expected_postings(doc_stats["term_df"], query_stats["term_df"], int(query_stats["n_queries"])) \
        / int(doc_stats["n_docs"])
