"""MS MARCO triples-small examples from the first triples alone are those of ir_datasets' full pair cache.

A miniature MS MARCO of real texts (the demo's pool passages, its DL19/DL20 and triples-sample
queries; 3,000 triples of random passage pairs: synthetic pairing) is planted where ir_datasets
looks before it downloads (``benchmarks/bench_front.py``'s ``plant``), and ir_datasets' own
``msmarco-passage/train/triples-small`` runs on it in a fresh interpreter: once the way ir_datasets
does by default (its ``MapSmallTriplesQidPid`` Cache over all triples, then the examples), once
the way ``prepare-training-source`` and ``prepare-training-data`` now do (the tar downloaded through
ir_datasets, from the planted file as its mirror, and kept as the local copy; only the first
triples mapped). The examples files must be equal byte for byte.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import REPO

CHILD = r'''
import hashlib, shutil, sys
from pathlib import Path
import ir_datasets
from ir_datasets.util import LocalDownload
from splade_rescale.training.data import fetch_irds_source, prepare_examples

home, tar, mode, n, buffer = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
ds_id = "msmarco-passage/train/triples-small"
dataset = ir_datasets.load(ds_id)
cache = dataset.docpairs_handler()._dlc
download = cache._streamer._streamer._streamer
download.expected_md5 = hashlib.md5(tar.read_bytes()).hexdigest()  # the planted tar's, not the real one's
local = download.mirrors[0]._path  # downloads/<md5>, the local copy ir_datasets reads before any mirror
ir_datasets.load("msmarco-passage").docs_store().build()  # prepare_corpus
if mode == "full":
    local.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tar, local)
    assert sum(1 for _ in dataset.docpairs_iter()) == 3000  # the whole Cache, as before
else:
    download.mirrors.insert(1, LocalDownload(tar))  # the planted tar stands in for the dataset's host
    assert fetch_irds_source(ds_id)["docpairs"] == "downloaded"
    assert local.read_bytes() == tar.read_bytes()
stream = {"seed": 7, "shuffle_buffer": buffer, "teacher_scores": None, "examples": n}
prepare_examples({"source": "ir_datasets", "id": ds_id}, stream, home / "examples.jsonl")
print("CACHE", Path(cache._path).exists())
'''


def _bench_front():
    spec = importlib.util.spec_from_file_location("bench_front", REPO / "benchmarks" / "bench_front.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n, buffer", [(500, 200), (4000, 300)])  # a prefix of the triples; more than all of them
def test_first_triples_give_the_full_caches_examples(tmp_path, n, buffer):
    bench = _bench_front()
    out = {}
    for mode in ("full", "prefix"):
        home = tmp_path / mode
        tar = bench.plant(home, REPO / "resources" / "demo", docs=2_000, queries=150, triples=3_000)
        env = {**os.environ, "IR_DATASETS_HOME": str(home), "IR_DATASETS_SKIP_DISK_FREE": "true"}
        child = subprocess.run([sys.executable, "-c", CHILD, str(home), str(tar), mode, str(n), str(buffer)],
                               env=env, capture_output=True, text=True)
        assert child.returncode == 0, child.stderr[-3000:]
        assert f"CACHE {mode == 'full'}" in child.stdout  # the prefix way never builds the full pair cache
        out[mode] = (home / "examples.jsonl").read_bytes()
    assert out["full"].count(b"\n") == n
    assert hashlib.sha256(out["prefix"]).digest() == hashlib.sha256(out["full"]).digest()
