"""Training seeds: one chain per seed, seed folders only with several seeds, tables with the
mean and spread over the seeds that did not collapse. That one seed changes no table:
tests/report/test_tables_golden.py."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TRIPLES
from support.training import TINY_SIZES
from support.workflow import TINY_CHAIN_DATA, copy_workflow, job_counts, run_workflow, snakemake, tiny_config


def _demo(**training) -> dict:
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["training"].update(training)
    config["recipes"] = yaml.safe_load((REPO / "config/recipes.yaml").read_text())["recipes"]
    return config


def test_run_names_and_the_seed_each_run_trains_with() -> None:
    from splade_rescale.runs import split_run
    from splade_rescale.training.recipes import resolve_recipe, seed_runs

    one = _demo()
    assert seed_runs(one, "minilm", "baseline") == ["baseline"]  # the recipe's own seed, no folder
    assert resolve_recipe(one, "minilm", "baseline")["seed"] == one["recipes"]["demo-cpu"]["seed"]
    two = _demo(seeds=[3, 5], overrides={"minilm-x16": {"seeds": [7], "rescaled": {"seeds": [1, 2, 4]}},
                                         "minilm": {"rescaled": {"seed-5": {"lambda_d": 9.0}}}})
    assert seed_runs(two, "minilm", "baseline") == ["baseline/seed-3", "baseline/seed-5"]
    assert seed_runs(two, "minilm-x16", "baseline") == ["baseline"]  # backbone level: one seed, 7
    assert resolve_recipe(two, "minilm-x16", "baseline")["seed"] == 7
    assert seed_runs(two, "minilm-x16", "rescaled") == [f"rescaled/seed-{s}" for s in (1, 2, 4)]  # variant level
    assert resolve_recipe(two, "minilm", "baseline/seed-5")["seed"] == 5
    assert resolve_recipe(two, "minilm", "rescaled/seed-5")["lambda_d"] == 9.0  # that seed alone
    assert resolve_recipe(two, "minilm", "rescaled/seed-3")["lambda_d"] == two["recipes"]["demo-cpu"]["lambda_d"]
    assert split_run("rescaled/seed-12") == ("rescaled", 12) and split_run("k1.5") == ("k1.5", None)


@pytest.mark.parametrize("training, key", [
    ({"seeds": [0, 1, 0]}, "training.seeds"),
    ({"seeds": []}, "training.seeds"),
    ({"overrides": {"minilm": {"rescaled": {"seeds": [2, 2]}}}}, "training.overrides.minilm.rescaled.seeds"),
    ({"overrides": {"minilm": {"seeds": [1, "x"]}}}, "training.overrides.minilm.seeds"),
])
def test_a_bad_seed_list_is_one_line_naming_its_key(training: dict, key: str) -> None:
    from splade_rescale.config import validate_config
    from splade_rescale.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        validate_config(_demo(**training))
    assert key in str(err.value) and "\n" not in str(err.value)


def test_a_per_seed_override_for_a_seed_not_trained_is_refused() -> None:
    from splade_rescale.errors import ConfigError
    from splade_rescale.training.recipes import seed_runs

    config = _demo(seeds=[0, 1], overrides={"minilm": {"baseline": {"seed-2": {"lambda_d": 1.0}}}})
    with pytest.raises(ConfigError, match=r"training.overrides.minilm.baseline.seed-2: not one of"):
        seed_runs(config, "minilm", "baseline")


def test_dry_run_plans_one_chain_per_seed_and_one_rescale_per_variant(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config["training"]["seeds"] = [0, 1]
    path = tmp_path / "seeds.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake("all", "-n", "--forceall", "--cores", "2", "--configfile", str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = job_counts(proc.stdout)
    backbones, variants, seeds, datasets, corpora = 2, 2, 2, 3, 2
    assert counts["rescale_head"] == counts["norms_variant"] == backbones * variants
    assert counts["train"] == backbones * variants * seeds
    models = backbones * variants * seeds + len(config["published_models"])  # each published model: one more
    assert counts["encode_queries"] == models
    assert counts["encode_corpus"] == counts["impact_index"] == models * corpora
    assert counts["evaluate"] == models * datasets
    assert "results/demo/models/minilm/rescaled/seed-1/final" in proc.stdout
    assert "results/demo/metrics/minilm-x16/baseline/seed-0/scifact.json" in proc.stdout
    assert "results/demo/models/minilm/rescaled/init" in proc.stdout
    assert "seed-0/init" not in proc.stdout and "results/demo/norms/minilm/rescaled/seed" not in proc.stdout

    one = snakemake("all", "-n", "--forceall", "--cores", "2", "--configfile", "config/demo.yaml")
    assert one.returncode == 0 and "seed-" not in one.stdout  # one seed: the paths as without seeds


# ------------------------------------------------------------------------------- the real chain

# a verdict no run can pass: that seed is marked collapsed after its FLOPS warm-up
FORCED_COLLAPSE = {"collapse_min_nnz": 1.0e6}


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workflow on a tiny random BERT, two variants x seeds [0, 1], seed 1 of 'rescaled' forced
    to collapse; real SciFact text, the MS MARCO triples sample, Lucene and ranx."""
    root = copy_workflow(tmp_path_factory.mktemp("seeds"), TINY_CHAIN_DATA)
    config = tiny_config("seeds-test")
    config["backbones"] = {"tiny": {"source": "config", "architecture": "bert", "sizes": TINY_SIZES}}
    config["training"] = {"recipe": "tiny", "data": TRIPLES, "threads": 1, "seeds": [0, 1],
                          "overrides": {"tiny": {"rescaled": {"seed-1": FORCED_COLLAPSE}}}}
    return run_workflow(root, config)


def _csv_rows(path: Path) -> list[dict[str, str]]:
    text = "".join(line for line in path.read_text(encoding="utf-8").splitlines(True) if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def _ndcg(root: Path, run: str) -> float:
    metrics = root / f"results/seeds-test/metrics/tiny/{run}/scifact.json"
    return json.loads(metrics.read_text())["metrics"]["nDCG@10"]


def test_each_seed_has_its_chain_and_the_variant_one_init(two_seeds: Path) -> None:
    models = two_seeds / "results/seeds-test/models/tiny"
    for variant in ("baseline", "rescaled"):
        assert (models / variant / "init").is_dir() and not (models / variant / "seed-0" / "init").exists()
        for seed in (0, 1):
            manifest = json.loads((models / variant / f"seed-{seed}" / "manifest.json").read_text())
            assert manifest["recipe"]["seed"] == seed
    assert json.loads((models / "rescaled/seed-1/manifest.json").read_text())["status"] == "collapsed"
    assert json.loads((models / "rescaled/seed-0/manifest.json").read_text())["status"] == "ok"


def test_table_means_are_the_seeds_metrics_by_hand(two_seeds: Path) -> None:
    tables = two_seeds / "results/seeds-test/tables"
    rows = {(r["backbone"], r["variant"]): r for r in _csv_rows(tables / "beir.csv")}
    by_hand = [_ndcg(two_seeds, f"baseline/seed-{s}") for s in (0, 1)]
    baseline = rows[("tiny", "baseline")]
    assert float(baseline["scifact nDCG@10"]) == pytest.approx(sum(by_hand) / 2, abs=1e-12)
    assert float(baseline["scifact nDCG@10 min"]) == pytest.approx(min(by_hand))
    assert float(baseline["scifact nDCG@10 max"]) == pytest.approx(max(by_hand))
    assert baseline["seeds"] == "2/2"
    # the collapsed seed is left out of the mean; the row stays, saying it covers one seed
    rescaled = rows[("tiny", "rescaled")]
    assert float(rescaled["scifact nDCG@10"]) == pytest.approx(_ndcg(two_seeds, "rescaled/seed-0"))
    assert rescaled["seeds"] == "1/2"
    md = (tables / "beir.md").read_text()
    assert "min–max" in md and "not collapsed / trained" in md
    row = next(line for line in md.splitlines() if line.replace(" ", "").startswith("|tiny|baseline|"))
    assert f"{sum(by_hand) / 2:.3f} ({min(by_hand):.3f}–{max(by_hand):.3f})" in row


def test_training_table_counts_collapsed_seeds_and_gives_each_seeds_reason(two_seeds: Path) -> None:
    rows = _csv_rows(two_seeds / "results/seeds-test/tables/training.csv")
    rescaled = [r for r in rows if r["variant"] == "rescaled"]
    assert [r["seed"] for r in rescaled] == ["all", "0", "1"]
    assert rescaled[0]["status"] == "1/2 collapsed"
    assert rescaled[2]["status"].startswith("collapsed (all-zero: ") and "1000000" in rescaled[2]["reason"]
    assert rescaled[2]["collapse step"]
    assert [r["status"] for r in rows if r["variant"] == "baseline"] == ["0/2 collapsed", "ok", "ok"]
    assert (two_seeds / "results/seeds-test/figures/training_curves.png").stat().st_size > 5000
