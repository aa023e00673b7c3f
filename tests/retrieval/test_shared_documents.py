"""A document two corpora share (same id, same text) is encoded once per model; each corpus keeps its results.

Real components: a tiny BERT saved to disk (the real SpladeEncoder on the CPU, fp32), the direct impact
indexer writing a Lucene index, Anserini's impact searcher, ranx's nDCG@10. Synthetic: the two corpora,
two overlapping local BEIR folders cut from 60 documents of the demo's SciFact subset (20 in both, and one
id in both with different texts, which is not shared), with the subset's queries and qrels.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from splade_rescale.data.datasets import load_dataset
from splade_rescale.evaluation.evaluate import evaluate_run
from splade_rescale.retrieval import encode, lucene
from splade_rescale.retrieval.shared_documents import digests_path, write_corpus_digests
from support.training import save_tiny_bert

SUBSET = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test",
          "subset": {"max_queries": 12, "max_judged_per_query": 3, "extra_docs": 50, "seed": 1}}
MAXLEN, WINDOW = 48, 8


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory):
    model = save_tiny_bert(tmp_path_factory.mktemp("tiny") / "model")
    return model, encode.load_encoder(model, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Corpus a: documents 0-39; b: documents 20-59 and a changed text under a's id 5 (a: 40, b: 41, 20 shared)."""
    ds = load_dataset("scifact", SUBSET)
    docs = list(ds.iter_docs())[:60]
    assert len(docs) == 60
    root = tmp_path_factory.mktemp("corpora")
    parts = {"a": docs[:40], "b": docs[20:] + [(docs[5][0], docs[5][1] + " (revised)")]}
    specs = {}
    for name, part in parts.items():
        folder = root / name
        (folder / "qrels").mkdir(parents=True)
        (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in part))
        (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                                                      for q, t in ds.queries.items()))
        (folder / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{d}\t{r}\n" for q, rels in ds.qrels.items() for d, r in rels.items()))
        specs[name] = {"spec": {"source": "beir_local", "path": str(folder)},
                       "digests": digests_path(root / f"{name}.json"), "qrels": ds.qrels, "docs": part}
        write_corpus_digests(name, specs[name]["spec"], specs[name]["digests"])
    return specs


def _encode(encoder, corpora: dict, name: str, out: Path, share: bool, **kw) -> dict:
    model, enc = encoder
    others = {c: corpora[c]["digests"] for c in corpora if c != name} if share else None
    return encode.encode_corpus(model, corpora[name]["spec"], out, MAXLEN, 4, name=name, encoder=enc,
                                precision="fp32", chunk_size=WINDOW, shard_size=16,
                                digests=corpora[name]["digests"], others=others, **kw)


def _lines(collection: Path) -> dict[str, bytes]:
    """The collection's lines by document id."""
    lines = [line for p in sorted(collection.glob("docs-*.jsonl.gz"))
             for line in gzip.decompress(p.read_bytes()).splitlines()]
    return {json.loads(line)["id"]: line for line in lines}


def _counted(monkeypatch: pytest.MonkeyPatch, enc) -> list[int]:
    """Texts the encoder is given, per call: the documents actually encoded."""
    real, counts = enc.encode_sparse, []

    def counting(batches, *args, **kw):
        def each():
            for batch in batches:
                counts.append(len(batch))
                yield batch
        return real(each(), *args, **kw)

    monkeypatch.setattr(enc, "encode_sparse", counting)
    return counts


def test_a_shared_document_is_encoded_once_and_each_corpus_scores_as_alone(
        encoder, corpora: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, enc = encoder
    queries_path = tmp_path / "queries.jsonl"
    encode.encode_queries(model, corpora["a"]["spec"] | {"split": "test"}, queries_path, MAXLEN, encoder=enc,
                          name="a")
    queries = {(r := json.loads(line))["id"]: r["vector"] for line in queries_path.read_text().splitlines()}
    alone = {c: tmp_path / "alone" / c for c in corpora}
    for c, out in alone.items():
        _encode(encoder, corpora, c, out, share=False)
    counts = _counted(monkeypatch, enc)
    shared = {c: tmp_path / "results/encoded/m/r/corpora" / c for c in corpora}
    stats = {c: _encode(encoder, corpora, c, out, share=True) for c, out in shared.items()}
    monkeypatch.undo()

    assert sum(counts) == 40 + 41 - 20  # the 20 shared documents once (not 81); a's id 5 twice: two texts
    assert (stats["a"]["shared_docs"], stats["a"]["shared_encoded_docs"], stats["a"]["encoded_docs"]) == (20, 20, 40)
    assert (stats["b"]["shared_docs"], stats["b"]["shared_reused_docs"], stats["b"]["encoded_docs"]) == (20, 20, 21)
    assert len(list((tmp_path / "results/encoded/m/r/shared").rglob("*.piece"))) >= 1
    for c in corpora:
        one, both = _lines(alone[c]), _lines(shared[c])
        assert sorted(one) == sorted(both) == sorted(d for d, _ in corpora[c]["docs"])  # exactly its documents
        alone_stats = json.loads(encode.stats_path_for(alone[c]).read_text())
        assert stats[c]["n_docs"] == alone_stats["n_docs"]
        runs, metrics = {}, {}
        for how, collection in (("alone", alone[c]), ("shared", shared[c])):
            lucene.build_impact_index(collection, tmp_path / how / f"{c}.index")
            run = lucene.impact_search(tmp_path / how / f"{c}.index", queries, k=100)
            lucene.write_trec_run(run, tmp_path / how / f"{c}.trec")
            runs[how] = (tmp_path / how / f"{c}.trec").read_text().splitlines()
            metrics[how] = evaluate_run(corpora[c]["qrels"], run, "beir")["metrics"]
        assert metrics["shared"] == pytest.approx(metrics["alone"], abs=1e-4)
        # the same vectors in another order in the shards: the same run, ties broken by docid on the real Lucene path
        assert list(one) != list(both) and one == both
        scores = [tuple(line.split()[i] for i in (0, 4)) for line in runs["alone"]]
        assert len(set(scores)) < len(scores)  # tied scores that the order could have broken otherwise
        assert runs["shared"] == runs["alone"]
        assert len(runs["alone"]) > 100


def test_a_corpus_that_shares_nothing_is_encoded_as_before(encoder, corpora: dict, tmp_path: Path) -> None:
    """With the other corpus's digests present but no document in common: the plain encode, byte for byte."""
    only_a = {"a": corpora["a"], "c": {**corpora["b"], "digests": tmp_path / "none.digests"}}
    (tmp_path / "none.digests").write_bytes(b"")
    plain = _encode(encoder, only_a, "a", tmp_path / "plain", share=False)
    checked = _encode(encoder, only_a, "a", tmp_path / "corpora" / "a", share=True)
    assert "shared_docs" not in checked and checked["n_docs"] == plain["n_docs"] == 40
    assert [p.read_bytes() for p in sorted((tmp_path / "plain").iterdir())] == [
        p.read_bytes() for p in sorted((tmp_path / "corpora" / "a").iterdir())]


def test_parts_share_and_join_into_the_corpus(encoder, corpora: dict, tmp_path: Path) -> None:
    """Corpus a in two parts (documents 0-23, 24-39; b's digests present): the joined collection holds a's
    documents with the vectors of a one-job encode, and its statistics are a one-job encode's."""
    one = _encode(encoder, corpora, "a", tmp_path / "alone" / "a", share=False)
    parts = [tmp_path / f"results/encoded/m/r/corpora/a.parts/{p}-of-2" for p in range(2)]
    stats = [_encode(encoder, corpora, "a", out, share=True, part=p, parts=2) for p, out in enumerate(parts)]
    assert [(s["n_docs"], s["shared_docs"]) for s in stats] == [(24, 4), (16, 16)]
    joined = encode.join_parts(parts, tmp_path / "results/encoded/m/r/corpora/a")
    assert (joined["shared_docs"], joined["encoded_docs"]) == (20, 40)
    assert _lines(tmp_path / "results/encoded/m/r/corpora/a") == _lines(tmp_path / "alone" / "a")
    for key in ("n_docs", "mean_nnz_per_doc", "term_df", "n_docs_empty_vector"):
        assert joined[key] == one[key], key


def test_the_size_guard_judges_shared_documents_too(encoder, corpora: dict, tmp_path: Path) -> None:
    """A corpus of 20 of a's documents only: nothing of its own to encode, yet a too-dense model stops at its
    first shared documents (encoding.index_budget_gb), before the store fills, and leaves no scratch behind."""
    (tmp_path / "c").mkdir()
    (tmp_path / "c/corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n"
                                                     for d, t in corpora["a"]["docs"][20:]))
    c = {"spec": {"source": "beir_local", "path": str(tmp_path / "c")}, "digests": tmp_path / "c.digests"}
    write_corpus_digests("c", c["spec"], c["digests"])
    out = tmp_path / "results/encoded/m/r/corpora/c"
    with pytest.raises(encode.TooDenseError, match="too dense"):
        _encode(encoder, {"a": corpora["a"], "c": c}, "c", out, share=True, budget_gb=1e-9)
    assert not list((tmp_path / "results/encoded/m/r/shared").rglob("*.piece"))
    assert sorted(p.name for p in out.parent.iterdir()) == []


def test_a_killed_encode_keeps_the_buckets_it_published(encoder, corpora: dict, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed while filling the store, the rerun reuses each bucket published before the kill and writes the
    collection of an uninterrupted run."""
    straight = tmp_path / "straight/encoded/m/r/corpora/a"
    _encode(encoder, corpora, "a", straight, share=True)
    _, enc = encoder
    real, calls = enc.encode_sparse, [0]

    def failing(batches, *args, **kw):
        def counted():
            for batch in batches:
                calls[0] += 1
                if calls[0] > 10:  # a's 20 own documents take 5 batches, then 5 of the shared buckets
                    raise RuntimeError("killed")
                yield batch
        return real(counted(), *args, **kw)

    out = tmp_path / "results/encoded/m/r/corpora/a"
    monkeypatch.setattr(enc, "encode_sparse", failing)
    with pytest.raises(RuntimeError, match="killed"):
        _encode(encoder, corpora, "a", out, share=True)
    monkeypatch.undo()
    stats = _encode(encoder, corpora, "a", out, share=True)
    assert stats["shared_reused_docs"] >= 5 and stats["shared_encoded_docs"] == 20 - stats["shared_reused_docs"]
    assert stats["encoded_docs"] == stats["shared_encoded_docs"]  # its 20 own documents were kept, not encoded again
    assert sorted(p.name for p in out.parent.iterdir()) == ["a", "a.stats.json"]
    assert _lines(out) == _lines(straight)


def test_a_job_walks_the_buckets_backwards_while_another_fills_the_store(tmp_path: Path) -> None:
    from splade_rescale.retrieval.shared_documents import SharedStore

    store = SharedStore(tmp_path, {"model": "m"})
    with store.running() as first, store.running() as second, store.running() as third:
        assert (first, second, third) == (False, True, False)
    assert not list((store.root / "running").iterdir())
    assert SharedStore(tmp_path, {"model": "other"}).root != store.root  # another model never reads these vectors


def test_stale_digests_never_give_a_document_another_text_s_vector(encoder, corpora: dict, tmp_path: Path) -> None:
    """Corpus a edited in place (a shared document's text) after its digests were written: the encode stops
    with one line naming the fix instead of copying the old text's vector from the store; and a digests file
    older than its corpus's preparation record is not used at all."""
    import os

    from splade_rescale.retrieval.shared_documents import fresh_digests

    folder = tmp_path / "a"
    shutil.copytree(corpora["a"]["spec"]["path"], folder)
    lines = (folder / "corpus.jsonl").read_text().splitlines()
    lines[25] = json.dumps({**json.loads(lines[25]), "text": "an edited text"})
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    edited = {**corpora, "a": {**corpora["a"], "spec": {"source": "beir_local", "path": str(folder)}}}
    with pytest.raises(ValueError, match="rerun rule corpus_digests"):
        _encode(encoder, edited, "a", tmp_path / "results/encoded/m/r/corpora/a", share=True)
    # b published every shared document first, so a's store pass is skipped: its own documents' pass stops it
    _encode(encoder, corpora, "b", tmp_path / "results/encoded/m/r/corpora/b", share=True)
    with pytest.raises(ValueError, match="rerun rule corpus_digests"):
        _encode(encoder, edited, "a", tmp_path / "results/encoded/m/r/corpora/a", share=True)
    prepared = tmp_path / "a.json"
    prepared.write_text("{}")
    shutil.copy(corpora["a"]["digests"], tmp_path / "a.digests")
    os.utime(tmp_path / "a.digests", (0, 0))
    assert fresh_digests(prepared) is None
    os.utime(prepared, (0, 0))
    assert fresh_digests(prepared) == tmp_path / "a.digests"


def test_a_corpus_encoded_without_the_store_is_no_longer_shared_with(tmp_path: Path) -> None:
    from splade_rescale.retrieval.shared_documents import may_share

    stats = tmp_path / "x.stats.json"
    assert may_share(stats)  # yet to be encoded: it will reuse what this job publishes
    stats.write_text(json.dumps({"n_docs": 40}))
    assert not may_share(stats)  # encoded alone: its vectors are gone with its shards
    stats.write_text(json.dumps({"n_docs": 40, "shared_docs": 20}))
    assert may_share(stats)


def test_shards_copy_whole_pieces_and_hold_what_line_by_line_writes(tmp_path: Path) -> None:
    """A bucket whose pieces hold exactly a corpus's documents in its order is copied as gzip members; any other
    order is written line by line. Both give the same lines and statistics (synthetic lines and term ids)."""
    import numpy as np

    from splade_rescale.retrieval.shared_documents import (
        DIGEST,
        SharedStore,
        doc_digest,
        fill_store,
        write_shared_shards,
    )

    docs = [(f"d{i}", f"text {i}") for i in range(300)]
    digests = np.frombuffer(b"".join(doc_digest(d, t) for d, t in docs), dtype=DIGEST)
    mask = np.arange(300) % 7 != 0
    terms = {d: np.unique(np.random.default_rng(i).integers(0, 50, i % 5)).astype(np.int32)
             for i, (d, _) in enumerate(docs)}  # every fifth vector empty

    def to_lines(batch, encoded):
        return ([json.dumps({"id": d, "vector": {str(t): 1 for t in terms[d].tolist()}}).encode() + b"\n"
                 for d, _ in batch], [terms[d] for d, _ in batch])

    store = SharedStore(tmp_path / "store", {"model": "m"})
    fill_store(store, iter(docs), digests, mask, tmp_path / "scratch", lambda batch: None, to_lines)
    reverse = np.arange(300)[::-1]
    buckets = np.frombuffer(digests.tobytes(), dtype=np.uint8)[::16]
    crowded = next(b for b in range(256) if (mask & (buckets == b)).sum() > 1)
    wanted = digests[mask & (buckets == crowded)]
    assert store.whole_pieces(crowded, wanted) is not None and store.whole_pieces(crowded, wanted[::-1]) is None
    written, stats = {}, {}
    for how, order in (("whole", np.arange(300)), ("lines", reverse)):
        (tmp_path / how).mkdir()
        stats[how] = write_shared_shards(store, digests[order], mask[order], tmp_path / how, 3, 50).as_dict("d", "d")
        shards = sorted((tmp_path / how).iterdir())
        assert shards[0].name == "docs-00003.jsonl.gz" and len(shards) >= 4
        written[how] = [line for p in shards for line in gzip.decompress(p.read_bytes()).splitlines(True)]
    assert sorted(written["whole"]) == sorted(written["lines"]) and len(written["whole"]) == mask.sum()
    assert stats["whole"] == stats["lines"]
    assert stats["whole"]["n_d_empty_vector"] == sum(not len(terms[d]) for (d, _), m in zip(docs, mask) if m)
    df = np.bincount(np.concatenate([terms[d] for (d, _), m in zip(docs, mask) if m]))
    assert stats["whole"]["term_df"] == {str(t): int(df[t]) for t in np.flatnonzero(df)}
