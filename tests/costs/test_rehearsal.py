"""The scale rehearsal: its DAG has the paper's structure, its data are built deterministically."""

from __future__ import annotations

import gzip
import hashlib
import json
import re

from conftest import REPO
from splade_rescale.costs.inputs import load_plan_config
from splade_rescale.costs.plan import planned_jobs
from splade_rescale.data.fixtures.rehearsal import build
from support.workflow import job_counts, snakemake


def test_rehearsal_dry_run_has_the_paper_structure():
    """Corpus work once per corpus (dev/DL19/DL20 share one), every rule of the paper run except the
    published model (its checkpoint needs the Hub) and the preparation of ir_datasets
    queries and training data (the rehearsal's are local files), plus BM25 negative mining for SciFact."""
    rehearsal = snakemake("all", "-n", "--forceall", "--cores", "2", "--configfile", "config/rehearsal.yaml")
    paper = snakemake("all", "-n", "--forceall", "--cores", "8", "--quiet", "rules")
    assert rehearsal.returncode == 0 and paper.returncode == 0, rehearsal.stderr[-2000:] + paper.stderr[-2000:]
    counts, paper_counts = job_counts(rehearsal.stdout), job_counts(paper.stdout)
    ir_datasets_only = {"prepare_queries", "prepare_training_source", "prepare_training_data"}
    assert set(counts) == set(paper_counts) - {"fetch_published_model"} - ir_datasets_only | {"mine_negatives"}
    models, corpora, datasets = 3 * 2, 3, 5
    for rule in ("encode_corpus", "impact_index"):
        assert counts[rule] == models * corpora, rule
    assert counts["encode_queries"] == models  # one job per model for all its query sets
    for rule in ("impact_retrieve", "evaluate"):
        assert counts[rule] == models * datasets, rule
    assert counts["bm25_index"] == counts["prepare_corpus"] == corpora and counts["train"] == models
    assert counts == planned_jobs(load_plan_config(REPO / "config/rehearsal.yaml"))
    assert re.search(r"results/rehearsal/indexes/modernbert-r-x16/rescaled/msmarco-like\b", rehearsal.stdout)
    assert "results/rehearsal/indexes/bert-r/baseline/dl19" not in rehearsal.stdout


def _digest(folder):
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


def test_rehearsal_data_is_real_text_and_deterministic(tmp_path):
    counts = build(tmp_path / "a", passages=40_000, dev_queries=50, beir_docs=6_000)
    build(tmp_path / "b", passages=40_000, dev_queries=50, beir_docs=6_000)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    with gzip.open(tmp_path / "a/msmarco-like/corpus.jsonl.gz", "rt") as f:
        docs = [json.loads(line) for line in f]
    assert len(docs) == counts["msmarco_passages"] == 40_000 and len({d["_id"] for d in docs}) == 40_000
    assert all(d["text"].strip() for d in docs)
    dl19_judged = {line.split()[2] for line in (tmp_path / "a/msmarco-like/qrels.dl19.txt").read_text().splitlines()}
    assert dl19_judged <= {d["_id"] for d in docs}  # the real in-pool qrels stay valid
    lines = (tmp_path / "a/arguana-like/queries.jsonl").read_text().splitlines()
    queries = [json.loads(line)["text"] for line in lines]
    assert len(queries) == 1_406 and sum(len(q.split()) for q in queries) / len(queries) > 100  # long queries
