"""A document's vector is a function of the document alone: how its encode is cut changes no byte.

Real components throughout: the demo's published splade-tiny and a tiny BERT saved to disk (the real
SpladeEncoder on the CPU), real text (the demo's MS MARCO passages and SciFact), the direct impact
indexer writing a Lucene index, Anserini's impact searcher, TREC run files.

* each document's vector line is byte-identical whatever its batch-mates, its position, the batch size,
  the token budget, the tokenising chunk, the shard size, the threads, part boundaries, its order in the
  corpus, short batches filled to the bucket's row count (as on CUDA) and an out-of-memory that halves
  the batch, in fp32 and (where the CPU has it) under bf16 autocast; queries likewise;
* every text is padded to its length bucket, never to its batch's longest (a float check shows that
  the padded length moves the vectors, so padding to the longest would fail these tests);
* two shard sizes and two indexing thread counts give byte-identical run files;
* a corpus encoded as three parts (separate jobs, joined into one collection) gives the vectors and
  run files of a one-job encode, byte for byte, and the same statistics;
* a part killed part-way resumes under another batch size and still matches; a part's SKIPPED record is
  the corpus's; the part ranges cover the corpus once.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO
from splade_rescale.data.corpora import part_range
from splade_rescale.data.datasets import load_dataset
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding import parts as part_stage
from splade_rescale.encoding import queries as query_stage
from splade_rescale.encoding import shard_folder
from splade_rescale.encoding.buckets import BUCKET_STEP, bucket_length
from splade_rescale.encoding.corpus import CorpusSource
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.encoding.skips import SKIPPED
from splade_rescale.encoding.stream import Batching, encode_stream
from splade_rescale.encoding.vector_lines import gzip_compressor
from splade_rescale.model.splade import SpladeEncoder, cpu_has_amx
from splade_rescale.retrieval import lucene
from support.training import save_tiny_bert

PUBLISHED = REPO / "resources" / "demo" / "models" / "splade-tiny"
PASSAGES = REPO / "resources" / "demo" / "msmarco-dl19-dl20-pool" / "corpus.jsonl.gz"
SCIFACT = REPO / "resources" / "demo" / "scifact" / "corpus.jsonl.gz"


def _real_texts() -> list[tuple[str, str]]:
    """50 MS MARCO passages and 50 SciFact abstracts (titled), ids made unique."""
    with gzip.open(PASSAGES, "rt") as f:
        passages = [(f"m{d['_id']}", d["text"]) for d in map(json.loads, itertools.islice(f, 50))]
    with gzip.open(SCIFACT, "rt") as f:
        abstracts = [(f"s{d['_id']}", f"{d['title']} {d['text']}") for d in map(json.loads, itertools.islice(f, 50))]
    return passages + abstracts


def _lines(collection: Path) -> dict[str, bytes]:
    return {json.loads(line)["id"]: line for p in sorted(collection.glob("docs-*.jsonl.gz"))
            for line in gzip.decompress(p.read_bytes()).splitlines(keepends=True)}


class _OutOfMemoryOnce:
    """The published encoder, out of memory on the first batch of more than two texts (as CUDA would be)."""

    def __init__(self, encoder: SpladeEncoder) -> None:
        self.inner, self.raised = encoder, 0
        self.device = encoder.device

    def tokenize(self, texts, max_length):
        return self.inner.tokenize(texts, max_length)

    def encode_sparse(self, batches, quantization, max_active_dims=None):
        def guarded():
            for batch in batches:
                if len(batch.ids) > 2 and not self.raised:
                    self.raised += 1
                    raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
                yield batch
        return self.inner.encode_sparse(guarded(), quantization, max_active_dims)


PRECISIONS = ["fp32"] + (["bf16"] if cpu_has_amx() else [])  # bf16 matmuls without AMX: ~100x slower


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_documents_vector_bytes_do_not_depend_on_how_it_is_encoded(precision: str, tmp_path: Path, caplog) -> None:
    encoder = SpladeEncoder.from_pretrained(PUBLISHED, device="cpu", precision=precision)
    docs = _real_texts()
    shuffled = random.Random(7).sample(docs, len(docs))

    def encoded(name: str, texts=docs, enc=encoder, threads: int | None = None, **kw) -> dict[str, bytes]:
        before = torch.get_num_threads()
        torch.set_num_threads(threads or before)
        try:
            encode.encode_docs(enc, texts, tmp_path / name, EncodeSettings(256, quantization=100, **kw))
        finally:
            torch.set_num_threads(before)
        return _lines(tmp_path / name)

    plain = encoded("plain", batch_size=32)
    cases = {
        "batch of 3": encoded("b3", batch_size=3),
        "token budget": encoded("budget", batch_size=64, batch_tokens=300),
        "chunks of 7, shards of 11": encoded("chunks", batch_size=5, chunk_size=7, shard_size=11),
        "one thread": encoded("t1", batch_size=16, threads=1),
        "another order": encoded("shuffled", texts=shuffled, batch_size=8),
        "filled rows": encoded("filled", batch_size=8, fill=True),
        "out of memory once": encoded("oom", enc=_OutOfMemoryOnce(encoder), batch_size=8),
    }
    parts = {}
    for p in range(3):  # part boundaries, each part a job of its own
        start, stop = part_range(len(docs), p, 3)
        encode.encode_docs(encoder, docs[start:], tmp_path / f"part{p}", EncodeSettings(256, batch_size=4),
                           len(docs), start=start, stop=stop)
        parts.update(_lines(tmp_path / f"part{p}"))
    cases["three parts"] = parts
    assert len(plain) == len(docs)
    for case, lines in cases.items():
        assert lines == plain, f"{case}: {sum(lines.get(k) != v for k, v in plain.items())} lines differ"
    assert "ran out of memory: batches of at most 4 texts" in caplog.text
    for same_shards in ("b3", "budget", "t1", "filled", "oom"):  # the gzip bytes too, where the shards are alike
        assert _files(tmp_path / same_shards) == _files(tmp_path / "plain"), same_shards


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_shards_gzip_bytes_do_not_depend_on_how_its_lines_arrive() -> None:
    """The compressor's output depends on how its input is cut; the shards' stream cuts it alike."""
    data = gzip.decompress(PASSAGES.read_bytes())[:3_000_000]
    outs = set()
    for seed in range(3):
        stream, rng, i, out = gzip_compressor(), random.Random(seed), 0, b""
        while i < len(data):
            n = rng.randint(1, 200_000)
            out += stream.compress(data[i:i + n])
            i += n
        outs.add(out + stream.flush())
    assert len(outs) == 1 and gzip.decompress(outs.pop()) == data


def test_queries_are_encoded_by_content(tmp_path: Path) -> None:
    encoder = SpladeEncoder.from_pretrained(PUBLISHED, device="cpu", precision="fp32")
    queries = {f"q{k}": text for k, (_, text) in enumerate(_real_texts()[:60])}
    for batch in (1, 7, 64):
        query_stage.encode_query_dict(
            encoder, queries, tmp_path / f"q{batch}.jsonl", EncodeSettings(64, batch_size=batch)
        )
    assert (
        (tmp_path / "q1.jsonl").read_bytes()
        == (tmp_path / "q7.jsonl").read_bytes()
        == (tmp_path / "q64.jsonl").read_bytes()
    )


def test_every_text_is_padded_to_its_bucket_not_to_its_batchs_longest() -> None:
    """The batches the stream makes hold one bucket each, padded to it; and the padded length does move a
    text's floats (so batches padded to their longest member would break the byte tests above)."""
    encoder = SpladeEncoder.from_pretrained(PUBLISHED, device="cpu", precision="fp32")
    docs = _real_texts()
    padded: list[tuple[list[int], int]] = []
    real_pad = encoder.pad

    def recorded(ids, length=None, rows=None):
        padded.append(([len(i) for i in ids], length))
        return real_pad(ids, length, rows)

    encoder.pad = recorded
    list(encode_stream(encoder, docs, 256, 100, batching=Batching(size=16)))
    del encoder.pad
    assert sum(len(lengths) for lengths, _ in padded) == len(docs)
    assert all(length == bucket_length(n) for lengths, length in padded for n in lengths)
    assert any(len(set(lengths)) > 1 for lengths, _ in padded)  # batch-mates of different lengths, one bucket

    ids = encoder.tokenize([text for _, text in docs], 256)
    moved = 0
    for text in ids[:40]:
        own = encoder._reps(encoder.pad([text], bucket_length(len(text))))
        longer = encoder._reps(encoder.pad([text], bucket_length(len(text)) + 4 * BUCKET_STEP))
        moved += not torch.equal(own, longer)
    assert moved > 0


# 25 documents of the demo's SciFact (a subset), 8 queries
SPEC = {
    "source": "beir_local",
    "path": str(REPO / "resources" / "demo" / "scifact"),
    "split": "test",
    "metrics": "beir",
    "subset": {"max_queries": 8, "max_judged_per_query": 2, "extra_docs": 17, "seed": 3},
}
MAXLEN, CHUNK = 48, 4  # the stream tokenises 4 documents at a time


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def encoder(model_dir: Path):
    return encode.load_encoder(model_dir, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def queries(encoder, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, int]]:
    path = tmp_path_factory.mktemp("q") / "queries.jsonl"
    query_stage.encode_query_dict(
        encoder, load_dataset("scifact", SPEC).queries, path, EncodeSettings(MAXLEN, batch_size=2)
    )
    return {(r := json.loads(line))["id"]: r["vector"] for line in path.read_text().splitlines()}


def _encode(model_dir: Path, encoder, out: Path, part: int = 0, parts: int = 1, **settings) -> dict:
    settings = {"batch_size": 2, "chunk_size": CHUNK, **settings}
    return encode.encode_corpus(encoder, model_dir, CorpusSource("scifact", SPEC), out,
                                EncodeSettings(MAXLEN, **settings), part, parts)


def _vectors(collection: Path) -> bytes:
    """The collection's lines in file order: what the indexer reads."""
    return b"".join(gzip.decompress(p.read_bytes()) for p in sorted(collection.glob("docs-*.jsonl.gz")))


def _run_file(collection: Path, queries: dict, root: Path) -> bytes:
    lucene.build_impact_index(collection, root / "index")
    lucene.write_trec_run(lucene.impact_search(root / "index", queries, k=100), root / "run.trec")
    return (root / "run.trec").read_bytes()


def test_shard_size_and_threads_change_no_vector_and_no_run_line(model_dir: Path, encoder, queries: dict,
                                                                 tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shard_folder, "MIN_SHARD_DOCS", 1)  # threads set the shard count even at 25 documents
    outputs, shards = {}, {}
    for shard_size, threads in itertools.product((3, 100), (1, 4)):
        root = tmp_path / f"s{shard_size}-t{threads}"
        stats = _encode(model_dir, encoder, root / "c", shard_size=shard_size, index_threads=threads)
        shards[(shard_size, threads)] = stats["shards"]
        outputs[(shard_size, threads)] = (_vectors(root / "c"), _run_file(root / "c", queries, root))
    assert sorted(set(shards.values())) == [1, 4, 9], shards  # the cuts differ
    assert len(set(outputs.values())) == 1
    vectors, run = outputs[(3, 1)]
    assert vectors.count(b"\n") == 25 and run.count(b"\n") > 100


def test_parts_equal_one_job(model_dir: Path, encoder, queries: dict, tmp_path: Path) -> None:
    one = _encode(model_dir, encoder, tmp_path / "one" / "c", shard_size=5)
    parts = [tmp_path / "parts" / f"c.parts/{p}-of-3" for p in range(3)]
    for p, out in enumerate(parts):
        _encode(model_dir, encoder, out, p, 3, shard_size=5, batch_size=3 + p)  # each part its own batching
    assert [json.loads(shard_folder.stats_path_for(p).read_text())["n_docs"] for p in parts] == [9, 9, 7]
    joined = part_stage.join_parts(parts, tmp_path / "parts" / "c")
    assert _vectors(tmp_path / "parts" / "c") == _vectors(tmp_path / "one" / "c")
    assert _run_file(tmp_path / "parts" / "c", queries, tmp_path / "parts") == _run_file(
        tmp_path / "one" / "c", queries, tmp_path / "one")
    for key in ("n_docs", "mean_nnz_per_doc", "term_df", "n_docs_empty_vector"):
        assert joined[key] == one[key], key
    assert joined["parts"] == 3 and joined["shards"] == 2 + 2 + 2
    assert json.loads(shard_folder.stats_path_for(tmp_path / "parts" / "c").read_text()) == joined


def test_a_killed_part_resumes_under_another_batch_size(model_dir: Path, encoder, tmp_path: Path, caplog) -> None:
    """Part 1 (documents 9-17) in shards of 3, killed after some finished shards, resumes after the last
    one with another batch size (as after an out-of-memory) and writes the bytes of an uninterrupted run."""
    straight = tmp_path / "straight"
    _encode(model_dir, encoder, straight, 1, 3, shard_size=3)
    real, calls = encoder.encode_sparse, itertools.count()

    def failing(batches, *args, **kw):
        def counted():
            for batch in batches:
                if next(calls) >= 7:  # one document a batch: killed at the eighth document
                    raise RuntimeError("killed")
                yield batch
        return real(counted(), *args, **kw)

    out = tmp_path / "c"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(encoder, "encode_sparse", failing)
        with pytest.raises(RuntimeError, match="killed"):
            _encode(model_dir, encoder, out, 1, 3, shard_size=3, batch_size=1, chunk_size=2)
    with caplog.at_level(logging.INFO):
        stats = _encode(model_dir, encoder, out, 1, 3, shard_size=3, batch_size=3, chunk_size=5)
    assert stats["resumed_docs"] in (3, 6) and stats["resumed_docs"] + stats["encoded_docs"] == 9
    assert "resuming at shard" in caplog.text
    assert _vectors(out) == _vectors(straight)


@pytest.mark.parametrize("total,parts", [(25, 3), (8_841_823, 9), (5_416_568, 6), (40_000, 2), (20_001, 2)])
def test_part_ranges_cover_the_corpus_once(total: int, parts: int) -> None:
    ranges = [part_range(total, p, parts) for p in range(parts)]
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:]))
    assert max(b - a for a, b in ranges) - min(b - a for a, b in ranges) <= parts


def test_a_part_skipped_skips_the_corpus(tmp_path: Path) -> None:
    """A collapsed model (or a part judged too dense) leaves SKIPPED records: the joined corpus is that record,
    through the workflow's command."""
    record = {"status": "too dense", "reason": "too dense to index (estimated 900.0 GB ...)"}
    parts = [tmp_path / f"c.parts/{p}-of-2" for p in range(2)]
    parts[0].mkdir(parents=True)
    (parts[0] / "docs-00000.jsonl.gz").write_bytes(gzip.compress(b'{"id": "d1", "contents": "", "vector": {}}\n'))
    shard_folder.stats_path_for(parts[0]).write_text(json.dumps({"n_docs": 1, "term_df": {}}))
    parts[1].mkdir()
    (parts[1] / SKIPPED).write_text(json.dumps(record))
    shard_folder.stats_path_for(parts[1]).write_text(json.dumps(record))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "splade_rescale.cli",
            "join-parts",
            "--parts",
            *map(str, parts),
            "--out",
            str(tmp_path / "c"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [SKIPPED]
    assert json.loads((tmp_path / "c" / SKIPPED).read_text()) == record
    assert json.loads(shard_folder.stats_path_for(tmp_path / "c").read_text()) == record
