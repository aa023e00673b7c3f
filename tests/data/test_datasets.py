"""datasets.py on the real demo data: loading, deterministic subsets, validation, ir_datasets offline."""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO
from splade_rescale.data.datasets import (
    DatasetError,
    default_exclude_self,
    doc_text,
    iter_triples_tsv,
    load_corpus,
    load_dataset,
)

DEMO = REPO / "resources" / "demo"
SCIFACT = {"source": "beir_local", "path": str(DEMO / "scifact"), "split": "test", "metrics": "beir"}
POOL = DEMO / "msmarco-dl19-dl20-pool"
DL19 = {"source": "trec_local", "corpus": str(POOL / "corpus.jsonl.gz"), "queries": str(POOL / "queries.dl19.tsv"),
        "qrels": str(POOL / "qrels" / "qrels.dl19-passage.in-pool.txt"), "metrics": "trec-dl"}
SUB = {"max_queries": 20, "max_judged_per_query": 3, "extra_docs": 50, "seed": 0}


def test_scifact_full_counts():
    ds = load_dataset("scifact", SCIFACT)
    assert len(ds.queries) == 300 and sum(len(v) for v in ds.qrels.values()) == 339
    assert ds.doc_ids is None and ds.exclude_self  # BEIR metrics: a query's own id is dropped
    docs = dict(ds.iter_docs())
    assert len(docs) == 5183 and ds.stats["n_docs"] == 5183
    assert all(d in docs for q in ds.qrels for d in ds.qrels[q])  # README: every qrels doc is in the corpus
    # title + " " + text, the BEIR convention
    first = json.loads(gzip.open(DEMO / "scifact" / "corpus.jsonl.gz", "rt").readline())
    assert docs[first["_id"]] == first["title"] + " " + first["text"]
    assert doc_text("", "abc") == "abc" and doc_text(None, "abc") == "abc"


def test_subset_deterministic_and_bounded():
    a = load_dataset("dl19", {**DL19, "subset": SUB})
    b = load_dataset("dl19", {**DL19, "subset": SUB})
    c = load_dataset("dl19", {**DL19, "subset": {**SUB, "seed": 1}})
    assert a.queries == b.queries and a.qrels == b.qrels and a.doc_ids == b.doc_ids
    assert a.doc_ids != c.doc_ids
    assert len(a.queries) == 20 and set(a.queries) == set(a.qrels)
    assert len(a.doc_ids) <= 20 * 3 + 50
    docs = [d for d, _ in a.iter_docs()]
    assert set(docs) == a.doc_ids and len(docs) == len(a.doc_ids)
    assert all(d in a.doc_ids for q in a.qrels for d in a.qrels[q])  # qrels restricted to kept docs
    full = load_dataset("dl19", DL19)
    for q in a.queries:  # highest grades first: each query keeps its best-graded judged docs
        best = max(full.qrels[q].values())
        assert max(a.qrels[q].values()) == best
        top3 = sorted(full.qrels[q].values(), reverse=True)[:3]
        kept = sorted((g for d, g in full.qrels[q].items() if d in a.doc_ids), reverse=True)[:3]
        assert kept == top3
    assert sum(1 for q in a.qrels for d in a.qrels[q] if d not in {x for x in a.doc_ids}) == 0


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _beir(tmp_path: Path, corpus: str, queries: str = '{"_id": "q1", "text": "hello"}\n',
          qrels: str = "query-id\tcorpus-id\tscore\nq1\td1\t1\n") -> dict:
    _write(tmp_path / "corpus.jsonl", corpus)
    _write(tmp_path / "queries.jsonl", queries)
    _write(tmp_path / "qrels" / "test.tsv", qrels)
    return {"source": "beir_local", "path": str(tmp_path), "split": "test"}


def test_malformed_jsonl_names_file_and_line(tmp_path):
    spec = _beir(tmp_path, '{"_id": "d1", "title": "", "text": "a"}\n{"_id": "d2", "text": oops}\n')
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:2: invalid JSON"):
        list(load_dataset("x", spec).iter_docs())


def test_duplicate_ids_and_bad_tsv(tmp_path):
    spec = _beir(tmp_path, '{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n')
    with pytest.raises(DatasetError, match="duplicate document id 'd1'"):
        list(load_dataset("x", spec).iter_docs())
    spec = _beir(tmp_path / "q", '{"_id": "d1", "text": "a"}\n',
                 queries='{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n')
    with pytest.raises(DatasetError, match=r"queries\.jsonl:2: duplicate query id"):
        load_dataset("x", spec)
    q = _write(tmp_path / "t" / "queries.tsv", "1\tfine\n2 no tab here\n")
    spec = {"source": "trec_local", "corpus": str(tmp_path / "corpus.jsonl"), "queries": str(q),
            "qrels": str(_write(tmp_path / "t" / "qrels.txt", "1 0 d1 1\n"))}
    with pytest.raises(DatasetError, match=r"queries\.tsv:2: expected 'qid<TAB>text'"):
        load_dataset("x", spec)
    _write(tmp_path / "t" / "qrels.txt", "1 0 d1\n")
    _write(tmp_path / "t" / "queries.tsv", "1\tfine\n")
    with pytest.raises(DatasetError, match=r"qrels\.txt:1: expected TREC qrels"):
        load_dataset("x", spec)
    with pytest.raises(DatasetError, match=r"triples.tsv:1"):
        list(iter_triples_tsv(_write(tmp_path / "triples.tsv", "a\tb\n")))


def test_unknown_qrels_queries_and_empty_docs_are_counted(tmp_path, caplog):
    spec = _beir(tmp_path, '{"_id": "d1", "title": "", "text": ""}\n{"_id": "d2", "text": "b"}\n',
                 qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\nq9\td2\t1\n")
    with caplog.at_level(logging.WARNING):
        ds = load_dataset("x", spec)
        docs = list(ds.iter_docs())
    assert ds.stats["n_qrels_queries_unknown"] == 1 and set(ds.qrels) == {"q1"}
    assert len(docs) == 2 and ds.stats["n_empty_docs"] == 1
    assert "not in the query file" in caplog.text and "empty text" in caplog.text


def test_exclude_self_default():
    """On for every BEIR set (Pyserini's --remove-query, BEIR's ignore_identical_ids), off for MS MARCO."""
    assert load_dataset("scifact", SCIFACT).exclude_self is True
    assert load_dataset("dl19", DL19).exclude_self is False
    assert default_exclude_self("x", {"source": "ir_datasets", "id": "beir/fiqa/test"}) is True  # metrics default: beir
    assert default_exclude_self("x", {"id": "msmarco-passage/dev/small", "metrics": "msmarco"}) is False
    assert default_exclude_self("x", {"id": "beir/quora/test", "metrics": "beir", "exclude_self": False}) is False
    assert default_exclude_self("x", {"metrics": "trec-dl", "exclude_self": True}) is True
    assert load_dataset("scifact", {**SCIFACT, "exclude_self": False}).exclude_self is False
    with pytest.raises(DatasetError, match=r"datasets\.x\.exclude_self: 'no' .*true or false"):
        default_exclude_self("x", {"metrics": "beir", "exclude_self": "no"})


def test_triples_sample():
    triples = list(iter_triples_tsv(DEMO / "msmarco-triples-sample" / "triples.tsv"))
    assert len(triples) == 100 and all(all(t) for t in triples)


def test_ir_datasets_offline_scifact(tmp_path):
    """The real ir_datasets path (`beir/scifact/test`) on a fixture zip placed where the download goes.

    ir_datasets keeps BEIR downloads at $IR_DATASETS_HOME/beir/<name>/source.zip and skips the
    download (and its md5 check) when that file exists; we build a small valid zip there from
    the real SciFact files: the test queries and qrels plus the 300 first documents.
    """
    src = DEMO / "scifact"
    home = tmp_path / "irds"
    zpath = home / "beir" / "scifact" / "source.zip"
    zpath.parent.mkdir(parents=True)
    with gzip.open(src / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        corpus = "".join(line for _, line in zip(range(299), fh))
    # BEIR has documents with a title and an empty text: the title must appear once, not twice
    corpus += json.dumps({"_id": "empty-text", "title": "Only a title", "text": ""}) + "\n"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("scifact/corpus.jsonl", corpus)
        z.write(src / "queries.jsonl", "scifact/queries.jsonl")
        z.write(src / "qrels" / "test.tsv", "scifact/qrels/test.tsv")
        z.write(src / "qrels" / "train.tsv", "scifact/qrels/train.tsv")
    local = tmp_path / "local"
    _write(local / "corpus.jsonl", corpus)
    (local / "qrels").mkdir()
    (local / "queries.jsonl").write_bytes((src / "queries.jsonl").read_bytes())
    (local / "qrels" / "test.tsv").write_bytes((src / "qrels" / "test.tsv").read_bytes())
    got = _load_in_subprocess(home, "beir/scifact/test")
    ref = load_dataset("sf", {"source": "beir_local", "path": str(local), "split": "test"})
    assert got["queries"] == ref.queries and len(got["queries"]) == 300
    assert got["qrels"] == ref.qrels
    assert got["docs"] == dict(ref.iter_docs()) and len(got["docs"]) == 300
    assert got["docs"]["empty-text"] == "Only a title"


def _load_in_subprocess(home: Path, ds_id: str) -> dict:
    """ir_datasets reads IR_DATASETS_HOME when imported: load in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "from splade_rescale.data.datasets import load_dataset\n"
        f"ds = load_dataset('x', {{'source': 'ir_datasets', 'id': {ds_id!r}}})\n"
        "json.dump({'queries': ds.queries, 'qrels': ds.qrels, 'docs': dict(ds.iter_docs())}, sys.stdout)\n"
    )
    env = {**os.environ, "IR_DATASETS_HOME": str(home), "IR_DATASETS_SKIP_DISK_FREE": "true",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_ir_datasets_offline_msmarco_dl19(tmp_path):
    """`msmarco-passage/trec-dl-2019/judged` from files placed in ir_datasets' cache locations.

    MS MARCO's loaders cache what they extract from the downloads at fixed paths under
    $IR_DATASETS_HOME/msmarco-passage/ (collection.tsv, trec-dl-2019/queries.tsv,
    trec-dl-2019/qrels) and use those files when present; irds_version.txt = v2 stops the
    encoding migration from deleting collection.tsv. Real DL19 queries/qrels, 400 real passages.
    """
    pool = DEMO / "msmarco-dl19-dl20-pool"
    base = tmp_path / "irds" / "msmarco-passage"
    (base / "trec-dl-2019").mkdir(parents=True)
    (base / "irds_version.txt").write_text("v2")
    docs = {}
    with gzip.open(pool / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        for _, line in zip(range(400), fh):
            rec = json.loads(line)
            docs[rec["_id"]] = rec["text"]
    (base / "collection.tsv").write_text("".join(f"{d}\t{t}\n" for d, t in docs.items()), encoding="utf-8")
    (base / "trec-dl-2019" / "queries.tsv").write_bytes((pool / "queries.dl19.tsv").read_bytes())
    (base / "trec-dl-2019" / "qrels").write_bytes((pool / "qrels" / "qrels.dl19-passage.txt").read_bytes())
    got = _load_in_subprocess(tmp_path / "irds", "msmarco-passage/trec-dl-2019/judged")
    ref = load_dataset("dl19", DL19 | {"qrels": str(pool / "qrels" / "qrels.dl19-passage.txt")})
    assert got["queries"] == ref.queries and len(got["queries"]) == 43
    assert got["qrels"] == ref.qrels and sum(map(len, got["qrels"].values())) == 9260
    assert got["docs"] == docs  # MS MARCO passages: text only, no title


def test_demo_msmarco_corpus_is_rebuilt_byte_for_byte(tmp_path):
    """The committed shared DL19/DL20 demo corpus is what ``splade_rescale.data.demo`` builds."""
    from splade_rescale.data.demo import OUT, build

    counts = build(out=tmp_path)
    committed = REPO / OUT
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in committed.iterdir())
    for path in tmp_path.iterdir():
        assert path.read_bytes() == (committed / path.name).read_bytes(), path.name
    docs, total = load_corpus("dl19-pool", {"source": "trec_local", "corpus": str(committed / "corpus.jsonl.gz")})
    judged = {line.split()[2] for name in ("dl19", "dl20")
              for line in (committed / f"qrels.{name}.txt").read_text().splitlines()}
    assert judged <= {d for d, _ in docs} and total == counts["documents"] == 719
