"""What a Lucene job may not do quietly: take the JDK's default heap and threads, accept an index short
of documents, commit half an index, or need the shards back (and so the encodes) for Anserini's
reference index. Synthetic collections written here; Lucene and Anserini are the real ones."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from splade_rescale.retrieval import lucene


def _collection(folder: Path, docs: list[dict]) -> Path:
    """A JsonVectorCollection shard in the encode step's layout."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs-00000.jsonl").write_text("".join(json.dumps({"id": d["id"], "contents": "", "vector": d["vector"]})
                                                     + "\n" for d in docs))
    return folder


DOCS = [{"id": f"d{i}", "vector": {str(t): 1 + (i * t) % 7 for t in range(i % 5, 40, 3)}} for i in range(23)]


def test_an_anserini_index_short_of_documents_fails(tmp_path: Path) -> None:
    """A weight beyond Java's int is dropped by Anserini (Jackson's asInt), which leaves that document
    empty and unindexed, where the collection counts it: the job fails and leaves no index."""
    coll = _collection(tmp_path / "coll", DOCS[:3] + [{"id": "huge", "vector": {"5": 2 ** 32}}])
    with pytest.raises(RuntimeError, match=r"Anserini indexed 3 documents of the 4 with a non-empty vector in "):
        lucene.build_impact_index(coll, tmp_path / "index", indexer="anserini")
    assert not (tmp_path / "index").exists()


def test_the_direct_writer_rolls_back_on_error(tmp_path: Path) -> None:
    coll = _collection(tmp_path / "coll", DOCS[:5])
    with open(coll / "docs-00000.jsonl", "a") as fh:
        fh.write('{"id": "bad", "contents": "", "vector": {"5": "x"}}\n')
    with pytest.raises(ValueError, match=r"docs-00000.jsonl:6: not a JsonVectorCollection line"):
        lucene._direct_index(lucene._shards(coll), tmp_path / "index", 1)
    assert not list((tmp_path / "index").glob("segments_*"))  # nothing committed


def test_reference_index_from_postings_alone(tmp_path: Path) -> None:
    """Anserini's index rebuilt from the direct index's postings, the shards deleted: the same summary,
    and the rebuilt collection is the original's indexable documents, in order."""
    docs = DOCS + [{"id": "empty", "vector": {}}]
    coll = _collection(tmp_path / "coll", docs)
    lucene.build_impact_index(coll, tmp_path / "index")
    (coll / "docs-00000.jsonl").unlink()
    rebuilt = tmp_path / "rebuilt"
    assert lucene.collection_from_postings(tmp_path / "index", rebuilt, docs_per_shard=10) == len(DOCS)
    lines = [json.loads(line) for p in sorted(rebuilt.iterdir()) for line in p.read_text().splitlines()]
    assert len(list(rebuilt.iterdir())) == 3
    assert [(d["id"], d["vector"]) for d in lines] == [(d["id"], d["vector"]) for d in DOCS]
    record = lucene.run_reference_index(tmp_path / "index", tmp_path / "reference", tmp_path / "check.json")
    assert record["same_summary"] and record["n_docs"] == len(DOCS) and record["anserini"]["n_docs"] == len(DOCS)
    assert json.loads((tmp_path / "check.json").read_text())["ids_sha256"] == record["ids_sha256"]
    assert not list(tmp_path.glob(".reference.*"))  # the rebuilt collection is removed


def test_a_job_starts_its_jvm_at_its_memory_and_threads(tmp_path: Path) -> None:
    """`--mem-mb` and `--threads` as a rule passes them: the heap is three quarters of the job's
    memory and the JVM sizes its own threads for the job's, as the JVM itself reports."""
    coll = _collection(tmp_path / "coll", DOCS)
    cli = Path(sys.executable).parent / "splade-rescale"
    proc = subprocess.run([str(cli), "index", "--collection", str(coll), "--threads", "2", "--mem-mb", "1000",
                           "--out", str(tmp_path / "index")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    heap = re.search(r"JVM: heap (\d+) MB at most, 2 processors", proc.stderr)
    assert heap and 650 <= int(heap.group(1)) <= 750, proc.stderr[-2000:]
