"""The sparsity verdict, judged apart from training: hand-made series with known answers."""

from __future__ import annotations

import pytest

from splade_rescale.rule_params import VERDICT_KEYS
from splade_rescale.training.recipes import OPTIONAL_DEFAULTS, TrainingConfigError
from splade_rescale.training.verdict import check_floors, judge, read_series, series_csv, sparsity_verdict

FLOORS = {k: OPTIONAL_DEFAULTS[k] for k in VERDICT_KEYS}  # 1, 4, 16, 0.5, 100
RECORD = {"status": "ok", "reason": None, "verdict": None, "collapse_step": None, "vocab_size": 1000,
          "recipe": {"flops_warmup_steps": 2}, "steps_done": 8}


def _series(nnz_d: list[float], nnz_q: float = 30.0) -> list[tuple[int, float, float]]:
    return [(step, nnz_q, d) for step, d in enumerate(nnz_d, 1)]


def test_a_healthy_run_is_ok_and_its_window_follows_the_warmup() -> None:
    manifest = judge(RECORD, _series([900, 700, 400, 300, 250, 240, 230, 220]), FLOORS)
    assert manifest["status"] == "ok" and manifest["reason"] is None and manifest["verdict"] is None
    assert manifest["sparsity"]["window_steps"] == [3, 8]  # steps after the 2 warm-up steps
    assert manifest["sparsity"]["mean_nnz_d"] == pytest.approx((400 + 300 + 250 + 240 + 230 + 220) / 6)
    assert manifest["floors"] == FLOORS


def test_near_empty_is_dated_to_when_it_became_so_and_stayed() -> None:
    # below 16 terms at steps 3, then up, then below from step 6 to the end
    series = _series([300, 200, 10, 40, 30, 12, 9, 8])
    manifest = judge(RECORD, series, {**FLOORS, "collapse_window": 3})
    assert manifest["status"] == "collapsed" and manifest["collapse_step"] == 6
    assert manifest["verdict"] == "near-empty: 9.7 terms per document"  # mean of 12, 9, 8
    assert manifest["reason"].startswith("near-empty representations: mean non-zeros over steps 6-8")


def test_new_floors_change_the_verdict_not_the_record() -> None:
    series = _series([300, 200, 40, 30, 20, 18, 17, 17])
    assert judge(RECORD, series, {**FLOORS, "collapse_window": 2})["status"] == "ok"
    strict = judge(RECORD, series, {**FLOORS, "collapse_window": 2, "collapse_near_empty_d": 20.0})
    assert strict["status"] == "collapsed" and strict["collapse_step"] == 6  # 18, 17, 17 < 20; 20 is not
    assert {k: v for k, v in strict.items() if k in RECORD and k not in ("status", "reason", "verdict",
                                                                          "collapse_step")} == \
        {k: v for k, v in RECORD.items() if k not in ("status", "reason", "verdict", "collapse_step")}


def test_all_zero_and_near_dense() -> None:
    zero = judge(RECORD, _series([50, 0.5, 0.5, 0.5, 0.5], nnz_q=0.0), FLOORS)
    assert zero["status"] == "collapsed" and zero["verdict"] == "all-zero: 0 terms per query"
    assert zero["collapse_step"] == 1  # the queries were all-zero from the start
    dense = judge(RECORD, _series([900, 800, 700, 600]), FLOORS)
    assert dense["status"] == "collapsed" and dense["verdict"] == "near-dense: 650 of 1000 terms per document"


def test_a_non_finite_stop_stays_collapsed_whatever_the_floors() -> None:
    record = {**RECORD, "status": "collapsed", "reason": "non-finite loss (nan) or gradient norm (nan)",
              "verdict": "non-finite loss or gradient", "collapse_step": 3}
    manifest = judge(record, _series([300, 300, 300]), {**FLOORS, "collapse_near_empty_d": 0.0})
    assert (manifest["status"], manifest["collapse_step"], manifest["sparsity"]) == ("collapsed", 3, None)


def test_a_run_within_the_warmup_is_not_judged() -> None:
    assert sparsity_verdict(_series([5, 5]), 2, FLOORS, 1000) == (None, None, None, None)


def test_the_series_file_round_trips_exactly(tmp_path) -> None:
    series = [(1, 31.25, 1e-7), (2, 0.1 + 0.2, 123456.789)]
    (tmp_path / "sparsity.csv").write_text(series_csv(series))
    assert read_series(tmp_path / "sparsity.csv") == series


@pytest.mark.parametrize("key,value", [("collapse_window", 0), ("collapse_window", 2.5),
                                       ("collapse_near_empty_d", "x")])
def test_bad_floors_name_the_key(key: str, value) -> None:
    with pytest.raises(TrainingConfigError, match=key):
        check_floors({**FLOORS, key: value})
