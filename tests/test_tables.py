"""Summaries, tables and figures on small hand-made results (TEST FIXTURES, not experiment output),
and the SLURM workflow profile's dry run."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import pytrec_eval

from conftest import REPO
from splade_rescale.evaluation.evaluate import METRIC_SETS, evaluate_run
from splade_rescale.model.norms import write_norms_table
from splade_rescale.report.figures import FIGURE_NAMES, figure_names, write_figures
from splade_rescale.report.summary import summarize_backbone
from splade_rescale.report.tables import FORMATS, table_names, write_tables

CONFIG = {
    "experiment": "fixture",
    "backbones": {"small": {}, "big-head": {}},
    "variants": {"baseline": {"policy": "constant", "factor": 1},
                 "rescaled": {"policy": "constant", "factor": "1/16"}},
    "reference_backbone": "small",
    "datasets": {
        "dl19-pool": {"metrics": "trec-dl", "note": "FIXTURE pool, not comparable to full-corpus numbers"},
        "scifact": {"metrics": "beir"},
        "nfcorpus": {"metrics": "beir"},
    },
}
QIDS = [f"q{i}" for i in range(40)]
LOG_COLUMNS = ("step", "lr", "lambda_q", "lambda_d", "loss", "loss_rank", "loss_flops_q", "loss_flops_d", "flops_q",
               "flops_d", "nnz_q", "nnz_d", "max_weight", "mean_weight", "grad_norm", "queries_per_s", "elapsed_s")


def scores(seed: int, shift: float = 0.0) -> dict[str, float]:
    rng = random.Random(seed)
    return {q: min(1.0, rng.uniform(0.1, 0.6) + shift + rng.uniform(-0.02, 0.02) * (shift != 0)) for q in QIDS}


def metrics_json(dataset: str, per_query: dict[str, dict[str, float]], **labels) -> dict:
    return {"status": "ok", "dataset": dataset, "dataset_note": CONFIG["datasets"][dataset].get("note"),
            "metric_set": CONFIG["datasets"][dataset]["metrics"], **labels,
            "metrics": {m: sum(v.values()) / len(v) for m, v in per_query.items()}, "per_query": per_query,
            "n_queries_evaluated": len(QIDS), "n_queries_without_results": 0,
            "efficiency": {"mean_nnz_per_query": 20.0, "mean_nnz_per_doc": 150.0, "flops": 1.5,
                           "index_size_bytes": 2_000_000, "qps": 300.0}}


def write(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


def per_query_for(dataset: str, base: dict[str, float]) -> dict[str, dict[str, float]]:
    """Every metric of the dataset's set; R@1000 a little above R@100, so that the two columns differ."""
    names = METRIC_SETS[CONFIG["datasets"][dataset]["metrics"]]
    return {m: {q: min(1.0, s + 0.05) for q, s in base.items()} if m == "R@1000" else dict(base) for m in names}


@pytest.fixture
def fixture_results(tmp_path: Path) -> dict:
    """A results tree: small/{baseline,rescaled} fine (rescaled identical on BEIR, far better on
    dl19-pool), big-head/baseline collapsed, big-head/rescaled far better than small/rescaled."""
    res = tmp_path / "results"
    inputs: dict[str, list[Path]] = {"small": [], "big-head": []}
    norms = []
    for b, row_norm in (("small", 1.0), ("big-head", 17.0)):
        norms.append(write(res / f"norms/{b}.json", {"backbone": b, "variant": "backbone", "architecture": "Bert",
                                                      "decoder_row_norm_mean": row_norm,
                                                      "decoder_frobenius_norm": 190 * row_norm}))
        inputs[b].append(norms[-1])
        for v, factor in (("baseline", 1.0), ("rescaled", 1 / 16)):
            norms.append(write(res / f"norms/{b}/{v}.json", {"backbone": b, "variant": v, "factor": factor,
                                                              "decoder_row_norm_mean": row_norm * factor}))
            inputs[b].append(norms[-1])
            collapsed = (b, v) == ("big-head", "baseline")
            inputs[b].append(write(res / f"models/{b}/{v}/manifest.json", {
                "status": "collapsed" if collapsed else "ok",
                "reason": "FIXTURE all-zero vectors" if collapsed else None,
                "collapse_step": 6 if collapsed else None, "steps_done": 6 if collapsed else 10, "steps_planned": 10,
                "recipe": {"name": "fixture"}, "last_log": {"step": 6, "loss": 0.5, "nnz_q": 0.0, "nnz_d": 0.0}}))
            log_csv = res / f"models/{b}/{v}/train_log.csv"
            with open(log_csv, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=LOG_COLUMNS)
                writer.writeheader()
                for step in range(2, 7 if collapsed else 11, 2):
                    writer.writerow({c: 0.0 for c in LOG_COLUMNS} | {"step": step, "loss": 1.0 / step,
                                                                   "flops_q": 5.0, "flops_d": 9.0, "nnz_q": 30 - step,
                                                                   "nnz_d": 100 - step})
            inputs[b].append(log_csv)
            for d in CONFIG["datasets"]:
                path = res / f"metrics/{b}/{v}/{d}.json"
                if collapsed:
                    inputs[b].append(write(path, {"status": "collapsed", "reason": "FIXTURE all-zero vectors",
                                                  "collapse_step": 6, "metrics": None, "per_query": None}))
                    continue
                if b == "small":
                    base = scores(1, 0.3) if (v == "rescaled" and d == "dl19-pool") else scores(1)
                else:
                    base = scores(2, 0.35)
                inputs[b].append(write(path, metrics_json(d, per_query_for(d, base), backbone=b, variant=v)))
    bm25 = [write(res / f"metrics/bm25/{d}.json", metrics_json(d, per_query_for(d, scores(3))))
            for d in CONFIG["datasets"]]
    norms_md, norms_csv = res / "tables/norms.md", res / "tables/norms.csv"
    write_norms_table(norms, norms_md, norms_csv)
    summaries = []
    for b, files in inputs.items():
        summaries.append(res / f"summary/{b}.json")
        summarize_backbone(b, files, summaries[-1])
    return {"res": res, "summaries": summaries, "bm25": bm25, "norms_csv": norms_csv}


def md_row(text: str, backbone: str, variant: str) -> str:
    return next(line for line in text.splitlines() if line.replace(" ", "").startswith(f"|{backbone}|{variant}|"))


def test_summary_gathers_norms_training_and_metrics(fixture_results):
    summary = json.loads(fixture_results["summaries"][1].read_text())
    assert summary["backbone"] == "big-head"
    assert summary["norms"]["decoder_row_norm_mean"] == 17.0
    base, resc = summary["variants"]["baseline"], summary["variants"]["rescaled"]
    assert base["training"]["status"] == "collapsed" and base["training"]["collapse_step"] == 6
    assert base["datasets"]["scifact"]["status"] == "collapsed"
    assert resc["datasets"]["dl19-pool"]["per_query"]["nDCG@10"].keys() == set(QIDS)
    assert resc["curves"]["step"] == [2.0, 4.0, 6.0, 8.0, 10.0]


def test_summary_rejects_a_foreign_file(tmp_path):
    stray = write(tmp_path / "results/metrics/other/baseline/scifact.json", {})
    with pytest.raises(ValueError, match="not a norms, training or metrics file"):
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
        assert "Made by config 'fixture' (sha256 " in text and "commit " in text and "pyserini" in text, path

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
    r100, r1000 = [sum(scores(3).values()) / len(QIDS) + d for d in (0.0, 0.05)]
    assert cells[2:] == [f"{r100:.3f}", f"{r1000:.3f}"] * 3  # two datasets, then the two means
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


def test_slurm_profile_dry_run_parses():
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "all", "-n", "--forceall", "--workflow-profile",
                           "workflow/profiles/slurm"], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    train = proc.stdout[proc.stdout.index("rule train:"):]
    resources = train[train.index("resources:"):].splitlines()[0]
    assert "slurm_partition=gpu" in resources and "gpu=1" in resources
    assert "figures" in proc.stdout and "tables" in proc.stdout


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
