"""One output for one input: a corpus's vectors and run files do not depend on how its encode is cut.

Real components throughout: a tiny BERT saved to disk (the real SpladeEncoder on the CPU, fp32),
the direct impact indexer writing a Lucene index, Anserini's impact searcher, TREC run files.

* two shard sizes and two indexing thread counts (which set the shard count) give byte-identical
  vectors and run files: the batching grid is the corpus's document order, not its shards;
* a corpus encoded as three parts (separate jobs, joined into one collection) gives the vectors and
  run files of a one-job encode, byte for byte, and the same statistics;
* a part killed part-way resumes mid-window and still matches; a part's SKIPPED record is the corpus's;
* the part ranges cover the corpus once, on the batching grid.
"""

from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from splade_rescale.data.corpora import CHUNK_DOCS, part_range
from splade_rescale.data.datasets import load_dataset
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding import queries as query_stage
from splade_rescale.encoding import shard_folder
from splade_rescale.encoding.skips import SKIPPED
from splade_rescale.retrieval import lucene
from support.training import save_tiny_bert

# 25 documents of the demo's SciFact (a subset), 8 queries
SPEC = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test",
        "metrics": "beir", "subset": {"max_queries": 8, "max_judged_per_query": 2, "extra_docs": 17, "seed": 3}}
MAXLEN, WINDOW = 48, 4  # batching windows of 4 documents: batches of 2 sorted by tokens within each


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def encoder(model_dir: Path):
    return encode.load_encoder(model_dir, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def queries(encoder, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, int]]:
    path = tmp_path_factory.mktemp("q") / "queries.jsonl"
    query_stage.encode_query_dict(encoder, load_dataset("scifact", SPEC).queries, path, MAXLEN, batch_size=2)
    return {(r := json.loads(line))["id"]: r["vector"] for line in path.read_text().splitlines()}


def _encode(model_dir: Path, encoder, out: Path, **kwargs) -> dict:
    return encode.encode_corpus(model_dir, SPEC, out, MAXLEN, 2, name="scifact", encoder=encoder,
                                precision="fp32", chunk_size=WINDOW, **kwargs)


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
    real, batches = encoder.encode_sparse, []

    def recorded(texts, *args, **kw):  # which documents (by their tokens) share each batch
        def each():
            for batch in texts:
                batches.append(tuple(sorted(repr(list(t)) for t in batch)))
                yield batch
        return real(each(), *args, **kw)

    monkeypatch.setattr(encoder, "encode_sparse", recorded)
    outputs, shards, grids = {}, {}, {}
    for shard_size, threads in itertools.product((3, 100), (1, 4)):
        root = tmp_path / f"s{shard_size}-t{threads}"
        batches.clear()
        stats = _encode(model_dir, encoder, root / "c", shard_size=shard_size, index_threads=threads)
        shards[(shard_size, threads)], grids[(shard_size, threads)] = stats["shards"], sorted(batches)
        outputs[(shard_size, threads)] = (_vectors(root / "c"), _run_file(root / "c", queries, root))
    assert sorted(set(shards.values())) == [1, 4, 9], shards  # the cuts differ
    assert all(grid == grids[(3, 1)] for grid in grids.values())  # the batches do not
    assert len(set(outputs.values())) == 1
    vectors, run = outputs[(3, 1)]
    assert vectors.count(b"\n") == 25 and run.count(b"\n") > 100


def test_parts_equal_one_job(model_dir: Path, encoder, queries: dict, tmp_path: Path) -> None:
    one = _encode(model_dir, encoder, tmp_path / "one" / "c", shard_size=5)
    parts = [tmp_path / "parts" / f"c.parts/{p}-of-3" for p in range(3)]
    for p, out in enumerate(parts):
        _encode(model_dir, encoder, out, shard_size=5, part=p, parts=3)
    assert [json.loads(shard_folder.stats_path_for(p).read_text())["n_docs"] for p in parts] == [12, 12, 1]
    joined = parts.join_parts(parts, tmp_path / "parts" / "c")
    assert _vectors(tmp_path / "parts" / "c") == _vectors(tmp_path / "one" / "c")
    assert _run_file(tmp_path / "parts" / "c", queries, tmp_path / "parts") == _run_file(
        tmp_path / "one" / "c", queries, tmp_path / "one")
    for key in ("n_docs", "mean_nnz_per_doc", "term_df", "n_docs_empty_vector"):
        assert joined[key] == one[key], key
    assert joined["parts"] == 3 and joined["shards"] == 3 + 3 + 1
    assert json.loads(shard_folder.stats_path_for(tmp_path / "parts" / "c").read_text()) == joined


def test_a_killed_part_resumes_mid_window(model_dir: Path, encoder, tmp_path: Path) -> None:
    """Part 1 (documents 12-23) in shards of 3 and windows of 4: killed in its third window, after two
    finished shards (12-17), it resumes at document 18, inside the window 16-19, which it encodes whole again."""
    straight = tmp_path / "straight"
    _encode(model_dir, encoder, straight, shard_size=3, part=1, parts=3)
    real, calls = encoder.encode_sparse, itertools.count()

    def failing(batches, *args, **kw):
        def counted():
            for batch in batches:
                if next(calls) >= 4:  # two batches a window: windows 12-15 and 16-19 done, then killed
                    raise RuntimeError("killed")
                yield batch
        return real(counted(), *args, **kw)

    out = tmp_path / "c"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(encoder, "encode_sparse", failing)
        with pytest.raises(RuntimeError, match="killed"):
            _encode(model_dir, encoder, out, shard_size=3, part=1, parts=3)
    stats = _encode(model_dir, encoder, out, shard_size=3, part=1, parts=3)
    assert stats["resumed_docs"] == 6 and stats["encoded_docs"] == 6
    assert _vectors(out) == _vectors(straight)


@pytest.mark.parametrize("total,parts", [(25, 3), (8_841_823, 9), (5_416_568, 6), (40_000, 2), (20_001, 2)])
def test_part_ranges_cover_the_corpus_on_the_grid(total: int, parts: int) -> None:
    window = CHUNK_DOCS if total > 100 else WINDOW
    ranges = [part_range(total, p, parts, window) for p in range(parts)]
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(start % window == 0 for start, _ in ranges)


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
    proc = subprocess.run([sys.executable, "-m", "splade_rescale.cli", "join-parts", "--parts", *map(str, parts),
                           "--out", str(tmp_path / "c")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [SKIPPED]
    assert json.loads((tmp_path / "c" / SKIPPED).read_text()) == record
    assert json.loads(shard_folder.stats_path_for(tmp_path / "c").read_text()) == record
