"""The workflow encodes a document two corpora share once per model, and each corpus scores as when encoded alone.

``snakemake all`` on a tiny random BERT (the suite's tiny recipe, the MS MARCO triples sample) over two
local BEIR datasets whose corpora overlap. SYNTHETIC: the corpora, cut from 60 documents of the demo's
SciFact subset (``a``: 0-39, ``b``: 20-59, so 20 shared), with the subset's queries and qrels. Real: the
digests, the store, Lucene, ranx. Then the same encodes again alone (no digests, no store, ``--forcerun``):
the same metrics and the same run lines.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, TRIPLES
from splade_rescale.data.datasets import load_dataset
from support.training import TINY_SIZES
from support.workflow import ENV, TINY_CHAIN_DATA, copy_workflow, run_workflow, snakemake, tiny_config

EXP = "share-test"
SUBSET = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test",
          "subset": {"max_queries": 12, "max_judged_per_query": 3, "extra_docs": 50, "seed": 1}}


def _dataset(folder: Path, docs: list[tuple[str, str]], ds) -> dict:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                                                  for q, t in ds.queries.items()))
    (folder / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{r}\n" for q, rels in ds.qrels.items() for d, r in rels.items()))
    return {"source": "beir_local", "path": str(folder), "split": "test", "metrics": "beir"}


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_workflow(tmp_path_factory.mktemp("share"), TINY_CHAIN_DATA)
    ds = load_dataset("scifact", SUBSET)
    docs = list(ds.iter_docs())[:60]
    config = tiny_config(EXP)
    config["backbones"] = {"tiny": {"source": "config", "architecture": "bert", "sizes": TINY_SIZES}}
    config["variants"] = {"baseline": config["variants"]["baseline"]}
    config["training"] = {"recipe": "tiny", "data": TRIPLES, "threads": 1}
    config["datasets"] = {"a": _dataset(root / "data/a", docs[:40], ds), "b": _dataset(root / "data/b", docs[20:], ds)}
    return run_workflow(root, config)


def test_the_workflow_encodes_a_shared_document_once_and_scores_each_corpus_as_alone(shared_run: Path) -> None:
    res = shared_run / "results" / EXP
    encoded = res / "encoded/tiny/baseline/corpora"
    stats = {c: json.loads((encoded / f"{c}.stats.json").read_text()) for c in "ab"}
    assert sorted((s["n_docs"], s["encoded_docs"], s["shared_docs"]) for s in stats.values()) == [
        (40, 20, 20), (40, 40, 20)]  # 60 documents encoded, not 80: whichever ran second took 20 from the store
    assert (res / "data/corpora/a.digests").stat().st_size == 16 * 40
    shared = {c: ((res / f"metrics/tiny/baseline/{c}.json").read_text(), (res / f"runs/tiny/baseline/{c}.trec")
                  .read_text()) for c in "ab"}

    for c in "ab":  # alone: no digests, no store, the encodes forced
        (res / f"data/corpora/{c}.digests").unlink()
    shutil.rmtree(res / "encoded/tiny/baseline/shared")
    targets = [f"results/{EXP}/metrics/tiny/baseline/{c}.json" for c in "ab"]
    proc = snakemake(*targets, "--cores", "2", "--configfile", "config/test.yaml", "--forcerun", "encode_corpus",
                     cwd=shared_run, env=ENV, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for c in "ab":
        alone = json.loads((encoded / f"{c}.stats.json").read_text())
        assert "shared_docs" not in alone and alone["encoded_docs"] == 40
        metrics, run = shared[c]
        assert json.loads((res / f"metrics/tiny/baseline/{c}.json").read_text())["metrics"] == pytest.approx(
            json.loads(metrics)["metrics"], abs=1e-4)
        assert (res / f"runs/tiny/baseline/{c}.trec").read_text() == run
