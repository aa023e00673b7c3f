"""Expected scores as data: the check names every run outside its figures, and the README and
docs/demo.md show exactly what config/expected/demo.yaml holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from splade_rescale.report.expected import ExpectedError, check, load_expected, render, rewrite_block

FP32 = {"a/baseline": {"status": "collapsed", "verdict": "near-empty"},
        "a/rescaled": {"status": "ok", "ndcg_10": 0.60, "nnz_per_doc": 200}}
BF16 = {**FP32, "a/rescaled": {"status": "ok", "ndcg_10": 0.45, "nnz_per_doc": 150}}
EXPECTED = {"dataset": "scifact", "tolerance": {"ndcg_10": 0.05, "nnz_per_doc": 1.5},
            "runs": {"fp32": FP32, "bf16": BF16}}


def _summary(results: Path, baseline: dict, rescaled: dict, bf16: bool = False) -> None:
    """results/summary/a.json with backbone a's two runs as the pipeline's summary holds them, and
    their manifests (the training precision)."""
    (results / "summary").mkdir(parents=True, exist_ok=True)
    variants = {}
    for variant, run in (("baseline", baseline), ("rescaled", rescaled)):
        datasets = {} if run["status"] != "ok" else {"scifact": {
            "metrics": {"nDCG@10": run["ndcg"]}, "efficiency": {"mean_nnz_per_doc": run["nnz"]}}}
        variants[variant] = {"training": {"status": run["status"], "verdict": run["verdict"]}, "datasets": datasets}
        (results / "models/a" / variant).mkdir(parents=True, exist_ok=True)
        (results / "models/a" / variant / "manifest.json").write_text(json.dumps({"bf16_autocast": bf16}))
    (results / "summary/a.json").write_text(json.dumps({"variants": variants}))


def _run(status="ok", verdict=None, ndcg=0.60, nnz=200.0) -> dict:
    return {"status": status, "verdict": verdict, "ndcg": ndcg, "nnz": nnz}


def test_runs_within_the_tolerance_pass(tmp_path):
    _summary(tmp_path, _run("collapsed", "near-empty: 9.1 terms per document"), _run(ndcg=0.64, nnz=290.0))
    assert check(EXPECTED, tmp_path) == []


def test_a_run_is_held_to_the_figures_of_its_training_precision(tmp_path):
    """The same figures pass as fp32 and fail as bf16 (and the reverse); a precision the file lacks is named."""
    fp32_like, bf16_like = _run(ndcg=0.61, nnz=210.0), _run(ndcg=0.44, nnz=140.0)
    collapsed = _run("collapsed", "near-empty: 3 terms")
    _summary(tmp_path / "fp32", collapsed, fp32_like)
    _summary(tmp_path / "bf16", collapsed, bf16_like, bf16=True)
    _summary(tmp_path / "swapped", collapsed, fp32_like, bf16=True)
    assert check(EXPECTED, tmp_path / "fp32") == [] and check(EXPECTED, tmp_path / "bf16") == []
    assert any("nDCG@10 0.610, expected 0.450" in p for p in check(EXPECTED, tmp_path / "swapped"))
    only_fp32 = {**EXPECTED, "runs": {"fp32": FP32}}
    assert check(only_fp32, tmp_path / "bf16") == [
        f"{run}: trained in bf16, for which the file has no figures" for run in FP32]


EMPTY = _run("collapsed", "near-empty: 3 terms")


@pytest.mark.parametrize(("baseline", "rescaled", "says"), [
    (_run(), _run(), "a/baseline: status ok (None), expected collapsed"),
    (_run("collapsed", "near-dense: 20000 terms per document"), _run(), "verdict 'near-dense"),
    (EMPTY, _run(ndcg=0.66), "nDCG@10 0.660, expected 0.600 +- 0.05"),
    (EMPTY, _run(nnz=301.0), "301 non-zeros per document, expected 200 within x/1.5"),
    (EMPTY, _run(nnz=133.0), "133 non-zeros per document"),
    (EMPTY, _run("collapsed", "near-empty: 2 terms"), "a/rescaled: status collapsed"),
])
def test_a_run_outside_its_figures_is_named(tmp_path, baseline, rescaled, says):
    _summary(tmp_path, baseline, rescaled)
    problems = check(EXPECTED, tmp_path)
    assert len(problems) == 1 and says in problems[0], problems


def test_a_bad_file_names_the_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**EXPECTED, "runs": {"fp32": {"a/rescaled": {"status": "ok", "ndcg_10": 0.6}}}}))
    with pytest.raises(ExpectedError,
                       match=r"bad.yaml: runs.fp32.a/rescaled is ok but lacks ndcg_10 or nnz_per_doc"):
        load_expected(path)
    path.write_text(yaml.safe_dump({**EXPECTED, "runs": {"bf16": {"a/rescaled": {"status": "fine"}}}}))
    with pytest.raises(ExpectedError, match=r"runs.bf16.a/rescaled.status must be ok or collapsed"):
        load_expected(path)
    path.write_text(yaml.safe_dump({**EXPECTED, "runs": FP32}))  # not keyed by precision
    with pytest.raises(ExpectedError, match=r"bad.yaml: runs must be keyed by training precision \(fp32, bf16\)"):
        load_expected(path)


def test_the_rendered_table_and_its_blocks():
    table = render(EXPECTED)
    assert "| a/baseline | fp32 | **collapsed (near-empty)** | collapsed | — |" in table
    assert "| a/rescaled | fp32 | ok | 0.600 | 200 |" in table and "| a/rescaled | bf16 | ok | 0.450 | 150 |" in table
    text = "before\n<!-- expected-scores:begin x -->\nold\n<!-- expected-scores:end x -->\nafter"
    assert rewrite_block(text, "x", "NEW") == \
        "before\n<!-- expected-scores:begin x -->\nNEW\n<!-- expected-scores:end x -->\nafter"
    with pytest.raises(ExpectedError, match="no block"):
        rewrite_block("no markers", "x", "NEW")


@pytest.mark.parametrize("doc", ["README.md", "docs/demo.md"])
def test_the_docs_show_the_demos_expected_scores_file(doc):
    expected = load_expected(REPO / "config/expected/demo.yaml")
    text = (REPO / doc).read_text()
    assert rewrite_block(text, "demo", render(expected)) == text, \
        f"{doc}: regenerate: splade-rescale expected --file config/expected/demo.yaml --render README.md docs/demo.md"
    assert all(runs["minilm-x16/baseline"]["status"] == "collapsed" for runs in expected["runs"].values())


def _metrics(results: Path, system: str, dataset: str, ndcg: float, nnz: float | None, status: str = "ok") -> None:
    path = results / "metrics" / system / f"{dataset}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    efficiency = {} if nnz is None else {"mean_nnz_per_doc": nnz}
    path.write_text(json.dumps({"status": status, "metrics": {"nDCG@10": ndcg}, "efficiency": efficiency}))


UNTRAINED = {"bm25": {"scifact": {"ndcg_10": 0.70}},
             "tiny/published": {"scifact": {"ndcg_10": 0.55, "nnz_per_doc": 110}, "dl19-pool": {"ndcg_10": 0.6}}}


def test_untrained_systems_are_held_to_one_figure_per_dataset(tmp_path):
    """BM25 and a published checkpoint: checked on every dataset the file names, whatever the precision."""
    expected = {**EXPECTED, "untrained": UNTRAINED}
    _summary(tmp_path, EMPTY, _run())
    _metrics(tmp_path, "bm25", "scifact", 0.72, None)
    _metrics(tmp_path, "tiny/published", "scifact", 0.56, 100.0)
    _metrics(tmp_path, "tiny/published", "dl19-pool", 0.62, 120.0)
    assert check(expected, tmp_path) == []
    _metrics(tmp_path, "tiny/published", "dl19-pool", 0.70, 120.0)
    _metrics(tmp_path, "tiny/published", "scifact", 0.56, 300.0)
    assert check(expected, tmp_path) == [
        "tiny/published: scifact 300 non-zeros per document, expected 110 within x/1.5",
        "tiny/published: dl19-pool nDCG@10 0.700, expected 0.600 +- 0.05"]
    (tmp_path / "metrics/bm25/scifact.json").unlink()
    assert any(p.startswith("bm25: no ") for p in check(expected, tmp_path))
    table = render(expected)
    assert "| bm25 | — | none (BM25) | 0.700 | — |" in table
    assert "| tiny/published | — | published checkpoint | 0.550 | 110 |" in table
    assert "| untrained system | scifact nDCG@10 | dl19-pool nDCG@10 |" in table
    assert "| bm25 | 0.700 | — |" in table and "| tiny/published | 0.550 | 0.600 |" in table


def test_an_untrained_system_without_ndcg_is_named(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**EXPECTED, "untrained": {"bm25": {"scifact": {"nnz_per_doc": 3}}}}))
    with pytest.raises(ExpectedError, match=r"bad.yaml: untrained.bm25.scifact lacks ndcg_10"):
        load_expected(path)
