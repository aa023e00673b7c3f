"""The too-dense guard runs on every corpus, and a model is also held to a budget over all its corpora.

ir_datasets' ``docs_count()`` is None until its docs store is built, and a corpus missing from
the published sizes then had no total: the guard could not extrapolate, and a near-dense
model encoded the whole corpus. The count now comes from the corpus's preparation record
(``prepare_corpus``). The per-corpus budget alone let a model at thousands of non-zeros per
document pass every corpus and write hundreds of GB over all of them; ``model_budget_gb``
holds the same bytes per document against the documents of all the model's corpora.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from splade_rescale import cli
from splade_rescale.data import datasets
from splade_rescale.data.prepare import model_documents, prepare_corpus, prepared_docs
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding import size_guard
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.model.sparse_rows import sparsify

SPEC = {"source": "ir_datasets", "id": "fake/unlisted-corpus"}  # unknown to ir_datasets
N_DOCS, SAMPLE, VOCAB = 100, 20, 1000


class Dense:
    """A stub encoder whose every weight is non-zero; counts the documents it encodes."""

    def __init__(self) -> None:
        self.docs = 0

    def tokenize(self, texts, max_length):
        return texts

    def encode_sparse(self, batches, quantization, max_active_dims=None):
        for texts in (b.ids for b in batches):
            self.docs += len(texts)
            yield sparsify(torch.rand(len(texts), VOCAB) + 0.05, quantization)


@pytest.fixture()
def unbuilt_irds(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ir_datasets corpus of N_DOCS documents whose docs_count() is None (no store built)."""
    dataset = SimpleNamespace(
        docs_count=lambda: None,
        docs_store=lambda: SimpleNamespace(),  # nothing to build ahead: preparation iterates the corpus
        docs_iter=lambda: (SimpleNamespace(doc_id=f"d{i}", text=f"document {i} text") for i in range(N_DOCS)))
    monkeypatch.setattr(datasets, "_irds", lambda ds_id: dataset)
    real = encode.encode_docs
    monkeypatch.setattr(encode, "encode_docs", lambda encoder, docs, out_dir, settings, *args, **kw: real(
        encoder, docs, out_dir, replace(settings, size_sample=SAMPLE), *args, **kw))


def _encode_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, runtime: dict, *extra: str) -> Dense:
    stub = Dense()
    monkeypatch.setattr(cli, "_encoder", lambda args, texts=None: stub)
    encoding = {"head": "fused", "precision": "fp32", "doc_max_length": 16, "quantization": 100,
                "max_active_dims": None}
    rc = cli.main(["encode-corpus", "--model", str(tmp_path), "--name", "fake", "--corpus", json.dumps(SPEC),
                   "--encoding", json.dumps(encoding), "--runtime", json.dumps({"batch_size": 10, **runtime}),
                   "--device", "cpu", "--out", str(tmp_path / "out" / "fake"), *extra])
    assert rc == 0
    return stub


def _record(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "fake.stats.json").read_text())


def test_an_uncounted_ir_datasets_corpus_is_still_guarded(unbuilt_irds, monkeypatch, tmp_path, caplog) -> None:
    prepared = tmp_path / "fake.json"
    assert prepare_corpus("fake", SPEC, prepared)["docs"] == N_DOCS and prepared_docs(prepared) == N_DOCS
    assert datasets.load_corpus("fake", SPEC)[1] is None  # what encode-corpus knew without the record

    budget = {"index_budget_gb": 1e-4}  # 100 kB: ~4 kB a document of this dense model is over it
    stub = _encode_cli(monkeypatch, tmp_path, budget, "--prepared", str(prepared))
    assert stub.docs == SAMPLE  # stopped after the sample, not after the corpus
    record = _record(tmp_path)
    assert record["status"] == "too dense" and record["reason"].startswith("too dense to index (estimated")
    assert "encoding.index_budget_gb" in record["reason"] and "fix:" in record["reason"]
    assert json.loads((tmp_path / "out" / "fake" / cli.SKIPPED).read_text())["status"] == "too dense"

    # without the count the guard cannot run: the whole corpus is encoded, and the log says why
    other = tmp_path / "without"
    other.mkdir()
    with caplog.at_level(logging.WARNING):
        stub = _encode_cli(monkeypatch, other, budget)
    assert stub.docs == N_DOCS and _record(other)["n_docs"] == N_DOCS
    assert "the size guard of encoding.index_budget_gb cannot run" in caplog.text


def test_a_model_over_its_budget_across_corpora_is_too_dense_on_each(unbuilt_irds, monkeypatch, tmp_path) -> None:
    """Each corpus is far within encoding.index_budget_gb, but the model's bytes per document over
    all its corpora (here this one and a 10M-document one) exceed encoding.model_budget_gb."""
    docs = [(f"d{i}", "text") for i in range(N_DOCS)]
    stub = Dense()
    with pytest.raises(size_guard.TooDenseError) as err:
        encode.encode_docs(
            stub,
            iter(docs),
            tmp_path / "a",
            EncodeSettings(
                16, batch_size=10, budget_gb=100, model_budget_gb=1, model_docs=10_000_000, size_sample=SAMPLE
            ),
            total=N_DOCS,
        )
    assert stub.docs == SAMPLE and not (tmp_path / "a").exists()
    message = str(err.value)
    assert message.startswith("too dense to index (estimated ") and "\n" not in message
    assert "over the model's 10,000,000 documents in all its corpora > encoding.model_budget_gb 1 GB" in message
    assert "encoding.index_budget_gb 100 GB" in message and message.endswith("or raise encoding.model_budget_gb")
    # within the model's budget the corpus is encoded in full, the model's estimate recorded
    stats = encode.encode_docs(
        Dense(),
        iter(docs),
        tmp_path / "b",
        EncodeSettings(16, batch_size=10, budget_gb=100, model_budget_gb=1, model_docs=1_000, size_sample=SAMPLE),
        total=N_DOCS,
    )
    assert stats["n_docs"] == N_DOCS and stats["size_estimate"]["model_docs"] == 1_000
    assert 0 < stats["size_estimate"]["model_gb"] < 1

    # the CLI path: the model's corpora and budget come in the runtime settings, as common.smk passes them
    prepared = tmp_path / "fake.json"
    prepare_corpus("fake", SPEC, prepared)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"corpus": "big", "docs": 10_000_000}))
    corpora = {"fake": {"spec": SPEC, "prepared": str(prepared)}, "big": {"spec": SPEC, "prepared": str(big)}}
    stub = _encode_cli(
        monkeypatch,
        tmp_path,
        {"index_budget_gb": 100, "model_budget_gb": 1, "model_corpora": corpora},
        "--prepared",
        str(prepared),
    )
    assert stub.docs == SAMPLE and "encoding.model_budget_gb 1 GB" in _record(tmp_path)["reason"]


def test_the_model_total_counts_corpora_not_prepared_yet(tmp_path: Path, caplog) -> None:
    """An encode can start before another corpus's preparation ends: that corpus is counted from
    its local files or taken from ir_datasets' shipped metadata, never downloaded; an unknown one is left out."""
    local = tmp_path / "corpus.jsonl"
    local.write_text("".join(json.dumps({"_id": f"d{i}", "text": "x"}) + "\n" for i in range(7)))
    done = tmp_path / "done.json"
    done.write_text(json.dumps({"docs": 1_000}))
    corpora = {
        "done": {"spec": SPEC, "prepared": str(done)},
        "local": {"spec": {"source": "trec_local", "corpus": str(local)}, "prepared": str(tmp_path / "no1.json")},
        "nfcorpus": {"spec": {"source": "ir_datasets", "id": "beir/nfcorpus"}, "prepared": str(tmp_path / "no2.json")},
        "unknown": {"spec": SPEC, "prepared": str(tmp_path / "no3.json")},
    }
    with caplog.at_level(logging.WARNING):
        assert model_documents(corpora) == 1_000 + 7 + 3_633
    assert "corpus unknown: not prepared yet and of unknown size" in caplog.text
    done.write_text("{}")
    with pytest.raises(ValueError, match=r"done.json: not a corpus preparation record .*; rerun the prepare_corpus"):
        model_documents(corpora)


def test_an_unreadable_other_corpus_is_left_out_of_the_model_total(tmp_path):
    """A broken corpus fails its own jobs; the other corpora's encode jobs still run."""
    from splade_rescale.data.prepare import model_documents

    good = tmp_path / "good.jsonl"
    good.write_text("".join(f'{{"_id": "d{i}", "text": "t"}}\n' for i in range(3)))
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_text("not gzip")
    corpora = {
        "good": {"spec": {"source": "trec_local", "corpus": str(good)}, "prepared": "missing/good.json"},
        "broken": {"spec": {"source": "trec_local", "corpus": str(broken)}, "prepared": "missing/broken.json"},
    }
    assert model_documents(corpora, tmp_path) == 3
