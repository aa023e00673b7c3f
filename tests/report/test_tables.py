"""Summaries, tables and figures on small hand-made results (TEST FIXTURES, not experiment output:
support/results.py)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import pytrec_eval

from conftest import REPO
from splade_rescale.evaluation.evaluate import evaluate_run
from splade_rescale.report.figures import FIGURE_NAMES, figure_names, write_figures
from splade_rescale.report.summary import summarize_backbone
from splade_rescale.report.tables import FORMATS, table_names, write_tables
from support.results import CONFIG, QIDS, md_row, write


def test_summary_gathers_norms_training_and_metrics(fixture_results):
    summary = json.loads(fixture_results["summaries"][1].read_text())
    assert summary["backbone"] == "big-head"
    assert summary["norms"]["decoder_row_norm_mean"] == 17.0
    assert summary["source"] == {"source": "local", "path": "/models/big-head"}  # from the backbone's manifest
    base, resc = summary["variants"]["baseline"], summary["variants"]["rescaled"]
    assert base["training"]["status"] == "collapsed" and base["training"]["collapse_step"] == 6
    assert base["datasets"]["scifact"]["status"] == "collapsed"
    assert resc["datasets"]["dl19-pool"]["per_query"]["nDCG@10"].keys() == set(QIDS)
    assert resc["curves"]["step"] == [2.0, 4.0, 6.0, 8.0, 10.0]


def test_summary_rejects_a_foreign_file(tmp_path):
    stray = write(tmp_path / "results/metrics/other/baseline/scifact.json", {})
    with pytest.raises(ValueError, match="not a backbone manifest, norms, training or metrics file"):
        summarize_backbone("small", [stray], tmp_path / "out.json")


def test_tables_written_with_collapse_bm25_marks_and_provenance(fixture_results, tmp_path):
    out = tmp_path / "tables"
    written = write_tables(CONFIG, fixture_results["summaries"], fixture_results["bm25"],
                           fixture_results["norms_csv"], out)
    names = table_names(CONFIG)
    assert "factor_sweep" not in names
    assert {p.name for p in written} == {f"{t}.{ext}" for t in names for ext in FORMATS}
    for path in written:
        text = path.read_text()
        assert text.strip()
        assert "Made by config 'fixture' (sha256 of its experiment, backbones, variants and datasets: " in text
        assert "commit " in text and "pyserini" in text, path
        assert "backbones: small org/small@0123456789ab, big-head local." in text, path

    in_domain = (out / "in_domain.md").read_text()
    assert "| BM25" in in_domain
    assert "collapsed" in md_row(in_domain, "big-head", "baseline")
    assert "†" in md_row(in_domain, "small", "rescaled")          # far better than its baseline
    assert "‡" in md_row(in_domain, "big-head", "rescaled")       # far better than the reference
    assert "FIXTURE pool, not comparable to full-corpus numbers" in in_domain
    assert "paired t-test" in in_domain and "Holm" in in_domain

    beir = (out / "beir.md").read_text()
    small_rescaled = md_row(beir, "small", "rescaled")
    assert "†" not in small_rescaled and "‡" not in small_rescaled  # identical to its baseline and to itself
    assert "mean (2)" in beir

    recall = (out / "beir_recall.md").read_text()
    header = next(line for line in recall.splitlines() if line.startswith("| backbone"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "backbone", "variant", "scifact R@100", "scifact R@1000", "nfcorpus R@100", "nfcorpus R@1000",
        "mean R@100 (2)", "mean R@1000 (2)"]
    assert "R@100 (as in the BEIR paper) and R@1000" in recall
    assert "collapsed" in md_row(recall, "big-head", "baseline")
    assert "‡" in md_row(recall, "big-head", "rescaled")          # far better than the reference, per dataset
    cells = [c.strip() for c in md_row(recall, "BM25", "–").strip("|").split("|")]
    bm25 = {json.loads(p.read_text())["dataset"]: json.loads(p.read_text())["metrics"] for p in fixture_results["bm25"]}
    per_dataset = [f"{bm25[d][m]:.3f}" for d in ("scifact", "nfcorpus") for m in ("R@100", "R@1000")]
    means = [f"{(bm25['scifact'][m] + bm25['nfcorpus'][m]) / 2:.3f}" for m in ("R@100", "R@1000")]
    assert cells[2:] == per_dataset + means  # two datasets, then the two means
    with open(out / "beir_recall.csv", newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    small = next(r for r in rows if r["backbone"] == "small" and r["variant"] == "baseline")
    assert float(small["mean R@1000 (2)"]) == pytest.approx(
        (float(small["scifact R@1000"]) + float(small["nfcorpus R@1000"])) / 2)
    assert "scifact R@100 marks" in small and "mean R@100 (2) marks" not in small

    with open(out / "in_domain.csv", newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    collapsed_row = next(r for r in rows if r["backbone"] == "big-head" and r["variant"] == "baseline")
    assert collapsed_row["dl19-pool nDCG@10"] == "collapsed"
    assert next(r for r in rows if r["backbone"] == "big-head" and r["variant"] == "rescaled")[
        "dl19-pool nDCG@10 marks"] == "‡"

    tex = (out / "in_domain.tex").read_text()
    assert r"\begin{tabular}" in tex and r"$^\ddagger$" in tex and "dl19-pool" in tex

    training = (out / "training.md").read_text()
    assert "FIXTURE all-zero vectors" in md_row(training, "big-head", "baseline")
    assert "not encoded, indexed or retrieved (SKIPPED.json)" in training and "still encoded" not in training
    head = (out / "head_norms.md").read_text()
    assert "17" in head and "1.062" in head  # 17 x 1/16


def test_configs_without_in_domain_or_beir_sets_get_one_line_tables(fixture_results, tmp_path):
    for kept, empty in (({"scifact", "nfcorpus"}, ("in_domain",)), ({"dl19-pool"}, ("beir", "beir_recall"))):
        config = json.loads(json.dumps(CONFIG))
        config["datasets"] = {d: s for d, s in CONFIG["datasets"].items() if d in kept}
        out = tmp_path / "-".join(sorted(kept))
        write_tables(config, fixture_results["summaries"], fixture_results["bm25"], fixture_results["norms_csv"],
                     out)
        for name in empty:
            kind = "BEIR" if name.startswith("beir") else "in-domain (MS MARCO or TREC DL)"
            md = (out / f"{name}.md").read_text()
            body = [line.strip("| ").strip() for line in md.split("\n\n")[1].splitlines()]
            assert len(body) == 3 and (body[0], body[2]) == ("note", f"no {kind} datasets in this config"), md
            for ext in ("csv", "tex", "html"):
                assert f"no {kind} datasets in this config" in (out / f"{name}.{ext}").read_text()
        full = [t for t in table_names(config) if t not in empty and t in ("in_domain", "beir", "beir_recall")]
        for name in full:
            assert "| BM25" in (out / f"{name}.md").read_text(), name


def test_beir_metric_set_recall_equals_trec_eval():
    """R@100 and R@1000 of the ``beir`` set, on a run deep enough that the two differ, against trec_eval."""
    rng = random.Random(0)
    docs = [f"d{i}" for i in range(1500)]
    qrels = {f"q{i}": {d: rng.choice([1, 2]) for d in rng.sample(docs, 30)} | {docs[0]: 0} for i in range(5)}
    run = {q: [(d, float(-j)) for j, d in enumerate(rng.sample(docs, 1200))] for q in qrels}
    ours = evaluate_run(qrels, run, "beir")["per_query"]
    te = pytrec_eval.RelevanceEvaluator(qrels, {"recall.100", "recall.1000"}).evaluate(
        {q: dict(hits) for q, hits in run.items()})
    assert list(ours) == ["nDCG@10", "R@100", "R@1000"]
    for q in qrels:
        assert ours["R@100"][q] == pytest.approx(te[q]["recall_100"], abs=1e-9)
        assert ours["R@1000"][q] == pytest.approx(te[q]["recall_1000"], abs=1e-9)
        assert ours["R@1000"][q] > ours["R@100"][q]


def sweep_config_and_summaries(fixture_results) -> tuple[dict, list[Path]]:
    """The fixture with a k4 variant (not run) and a match_reference variant that resolved to x1/16
    on both backbones (its runs: copies of ``rescaled``)."""
    config = json.loads(json.dumps(CONFIG))
    config["variants"]["k4"] = {"policy": "constant", "factor": "1/4"}
    config["variants"]["matched"] = {"policy": "match_reference", "reference": "small"}
    for path in fixture_results["summaries"]:
        summary = json.loads(path.read_text())
        matched = json.loads(json.dumps(summary["variants"]["rescaled"]))
        matched["norms"]["variant"] = "matched"
        matched["training"]["last_log"]["nnz_d"] = 123.0
        summary["variants"]["matched"] = matched
        path.write_text(json.dumps(summary))
    return config, fixture_results["summaries"]


def test_factor_sweep_table_orders_each_backbone_by_factor_with_match_reference(fixture_results, tmp_path):
    config, summaries = sweep_config_and_summaries(fixture_results)
    assert table_names(config)[-1] == "factor_sweep"
    write_tables(config, summaries, fixture_results["bm25"], fixture_results["norms_csv"], tmp_path)
    sweep = (tmp_path / "factor_sweep.md").read_text()
    rows = [line.replace(" ", "").split("|")[1:4] for line in sweep.splitlines() if line.startswith("| small")]
    assert rows == [["small", "baseline", "x1"], ["small", "k4", "x0.25"], ["small", "rescaled", "x0.0625"],
                    ["small", "matched", "x0.0625"]]
    assert md_row(sweep, "small", "k4").count("–") >= 3  # configured, never run: missing, not zero
    collapsed = md_row(sweep, "big-head", "baseline")
    assert "collapsed (" not in collapsed and collapsed.count("collapsed") >= 2  # no verdict in the fixture
    assert "match_reference's factor as resolved" in sweep
    with open(tmp_path / "factor_sweep.csv", newline="") as f:
        table = list(csv.DictReader(line for line in f if not line.startswith("#")))
    small = {r["variant"]: r for r in table if r["backbone"] == "small"}
    assert float(small["matched"]["factor"]) == pytest.approx(1 / 16)
    assert float(small["matched"]["nnz d (training)"]) == 123.0


def test_training_table_names_a_near_empty_collapse(fixture_results, tmp_path):
    path = fixture_results["summaries"][1]
    summary = json.loads(path.read_text())
    summary["variants"]["baseline"]["training"]["verdict"] = "near-empty: 2.6 terms per document"
    path.write_text(json.dumps(summary))
    write_tables(CONFIG, fixture_results["summaries"], fixture_results["bm25"], fixture_results["norms_csv"], tmp_path)
    row = md_row((tmp_path / "training.md").read_text(), "big-head", "baseline")
    assert "collapsed (near-empty: 2.6 terms per document)" in row


def test_factor_sweep_figure_is_made_with_the_sweep_table(fixture_results, tmp_path):
    config, summaries = sweep_config_and_summaries(fixture_results)
    assert figure_names(config)[-1] == "factor_sweep" and "factor_sweep" not in figure_names(CONFIG)
    written = write_figures(config, summaries, tmp_path)
    assert (tmp_path / "factor_sweep.png").stat().st_size > 5000 and len(written) == 2 * len(figure_names(config))
    from splade_rescale.report.figures import factor_sweep_figure
    data = {json.loads(p.read_text())["backbone"]: json.loads(p.read_text()) for p in summaries}
    fig = factor_sweep_figure(config, data)
    left, right = fig.axes
    small = next(line for line in left.get_lines() if line.get_label() == "small")
    assert list(small.get_xdata()) == [1 / 16, 1.0]  # k4 never ran: no point, no zero
    assert right.get_yscale() == "log"
    collapsed = [c for c in left.collections if tuple(c.get_facecolor()[0][:3]) == (1.0, 0.0, 0.0)]
    assert [tuple(c.get_offsets()[0]) for c in collapsed] == [(1.0, 0.0)]  # big-head at x1, drawn at 0


def test_figures_are_nonempty_png_and_pdf(fixture_results, tmp_path):
    written = write_figures(CONFIG, fixture_results["summaries"], tmp_path)
    assert {p.name for p in written} == {f"{n}.{ext}" for n in FIGURE_NAMES for ext in ("png", "pdf")}
    for path in written:
        head = path.read_bytes()[:8]
        assert path.stat().st_size > 5000, path
        assert head.startswith(b"\x89PNG") if path.suffix == ".png" else head.startswith(b"%PDF"), path


def test_every_report_output_has_a_caption_file():
    config = json.loads(json.dumps(CONFIG))
    config["variants"]["k4"] = {"policy": "constant", "factor": "1/4"}
    report = REPO / "workflow/report"
    missing = [n for n in [f"tables_{t}" for t in table_names(config)] + [f"figures_{f}" for f in figure_names(config)]
               if not (report / f"{n}.rst").is_file()]
    assert not missing and (report / "workflow.rst").is_file(), missing


def test_a_corpus_too_dense_to_index_shows_its_status_not_collapsed(fixture_results, tmp_path):
    """A model whose corpus was estimated over encoding.index_budget_gb is shown as 'too dense'."""
    res = fixture_results["res"]
    write(res / "metrics/small/baseline/scifact.json",
          {"status": "too dense", "reason": "too dense to index (estimated 900.0 GB ...)", "metrics": None,
           "per_query": None, "backbone": "small", "variant": "baseline", "dataset": "scifact"})
    files = [p for p in sorted(res.rglob("*")) if p.is_file() and "/small" in str(p).replace(str(res), "")
             and p.suffix in (".json", ".csv") and "summary" not in str(p)]
    summarize_backbone("small", files, res / "summary/small.json")
    out = tmp_path / "tables"
    write_tables(CONFIG, fixture_results["summaries"], fixture_results["bm25"], fixture_results["norms_csv"], out)
    beir = md_row((out / "beir.md").read_text(), "small", "baseline")
    assert beir.count("too dense") == 2 and "collapsed" not in beir  # the dataset cell and the mean
    efficiency = (out / "efficiency.md").read_text()
    assert any(line.replace(" ", "").startswith("|scifact|small|baseline|") and "too dense" in line
               for line in efficiency.splitlines())


def test_a_published_model_has_its_rows_beside_the_trained_runs(fixture_results, tmp_path):
    """A published checkpoint (untrained, like BM25) gets a row in every effectiveness table, in the
    efficiency table (terms per query and document, FLOPS, index size, QPS) and in the calibration
    table, where it has no published figure on these datasets."""
    from splade_rescale.evaluation.evaluate import METRIC_SETS

    config = {**CONFIG, "published_models": {"pub": {"source": "local", "path": "/models/pub"}}}
    published = []
    for i, (dataset, spec) in enumerate(CONFIG["datasets"].items()):
        metrics = {name: 0.3 + 0.1 * i + 0.01 * j for j, name in enumerate(METRIC_SETS[spec["metrics"]])}
        entry = {"backbone": "pub", "dataset": dataset, "status": "ok", "metrics": metrics,
                 "per_query": {m: dict.fromkeys(QIDS, v) for m, v in metrics.items()},
                 "efficiency": {"mean_nnz_per_query": 21.5 + i, "mean_nnz_per_doc": 111.0 + i, "flops": 0.75,
                                "index_size_bytes": 2_500_000, "qps": 321.0}}
        published.append(write(tmp_path / f"pub/{dataset}.json", entry))
    out = tmp_path / "tables"
    write_tables(config, fixture_results["summaries"], fixture_results["bm25"], fixture_results["norms_csv"], out,
                 published)
    beir = (out / "beir.md").read_text()
    assert [c.strip() for c in md_row(beir, "pub", "published").strip("|").split("|")][2:] == [
        "0.400", "0.500", "0.450"]  # scifact, nfcorpus, their mean; no significance mark
    assert "0.300" in md_row((out / "in_domain.md").read_text(), "pub", "published")
    efficiency = [line for line in (out / "efficiency.md").read_text().splitlines() if "| pub " in line]
    assert len(efficiency) == 3 and "| 22.5 " in efficiency[1] and "| 112.0 " in efficiency[1]
    assert "| 2.5 " in efficiency[1] and "| 321.0 " in efficiency[1]
    calibration = (out / "calibration.md").read_text()
    assert "| pub " in calibration and "0.4000" in calibration
