"""Resuming a corpus encode: only under the same inputs, never needing a hand to clear leftovers.

Each test interrupts the real ``encode_corpus`` (a tiny BERT saved to disk, the real resume key
through ``model_fingerprint``) after some finished shards, changes something, reruns, and
compares with an uninterrupted run under the new settings:

* another effective precision (``auto`` on a node with AMX is bf16) starts again, with one log line
  naming what differs, and the result equals the uninterrupted run byte for byte; another batch size
  resumes (a document's vector depends on the document alone) and equals it too;
* retrained weights (same size, same modification times) start again; a copy of the same model resumes;
* a local corpus edited in place (same ids and count) starts again;
* a "too dense" verdict reached on resume removes the work folder, and the verdict is judged on
  the same sample as an uninterrupted run's;
* a record, df file or state.json cut short (a node crash) counts as unfinished, not as an error.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conftest import REPO
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding import shard_folder, size_guard
from splade_rescale.encoding.corpus import CorpusSource
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.model import splade
from support.training import save_tiny_bert

SPEC = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test",
        "metrics": "beir", "subset": {"max_queries": 8, "max_judged_per_query": 2, "extra_docs": 17, "seed": 3}}
MAXLEN, SHARD, CHUNK = 48, 3, 6  # 25 documents in 9 shards of 3, tokenised 6 at a time
LOGGER = "splade_rescale.encoding.shard_folder"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny") / "model")


def _encode(model: Path, out: Path, *, amx: bool = False, batch_size: int = 2, interrupt_after: int | None = None,
            spec: dict = SPEC, files_sha256: dict | None = None, **settings) -> dict:
    """``encode_corpus`` as the CLI calls it (configured precision ``auto``) on a CPU with or without
    AMX; ``interrupt_after``: the encoder fails after that many batches, as a killed job stops."""
    settings = EncodeSettings(MAXLEN, batch_size=batch_size, shard_size=SHARD, **{"chunk_size": CHUNK, **settings})
    source = CorpusSource("corpus", spec, ".", None, files_sha256)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(splade, "cpu_has_amx", lambda: amx)
        enc = encode.load_encoder(model, device="cpu", precision="auto")
        if interrupt_after is None:
            return encode.encode_corpus(enc, model, source, out, settings)
        real, calls = enc.encode_sparse, itertools.count()

        def failing(batches, *args, **kw):
            def counted():
                for batch in batches:
                    if next(calls) >= interrupt_after:
                        raise RuntimeError("interrupted")
                    yield batch
            return real(counted(), *args, **kw)

        enc.encode_sparse = failing
        with pytest.raises(RuntimeError, match="interrupted"):
            encode.encode_corpus(enc, model, source, out, settings)
        assert len(list((shard_folder.work_folder(out) / "records").glob("*.json"))) >= 2
        return {}


def _shards(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _restarts(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "starting again" in r.getMessage()]


def test_another_batch_size_resumes_and_equals_an_uninterrupted_run(model_dir: Path, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The batch size is a runtime setting (a user lowers it after an out-of-memory): the finished
    shards are kept, and the result is the bytes of a run at either batch size."""
    out = tmp_path / "c"
    _encode(model_dir, out, interrupt_after=8)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        stats = _encode(model_dir, out, batch_size=3, chunk_size=4)
    assert not _restarts(caplog) and stats["resumed_docs"] >= 6
    _encode(model_dir, tmp_path / "straight")
    assert _shards(out) == _shards(tmp_path / "straight")


@pytest.mark.parametrize("after,differs", [({"amx": True}, "precision=fp32; now bf16")], ids=["precision"])
def test_other_numerics_start_again_and_equal_an_uninterrupted_run(
    model_dir: Path, tmp_path: Path, after: dict, differs: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Configured precision ``auto`` throughout, as the workflow passes it: moving to a node where
    it resolves to bf16 (or another batch size) must not keep the fp32 shards."""
    out = tmp_path / "c"
    _encode(model_dir, out, interrupt_after=8)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        stats = _encode(model_dir, out, **after)
    assert _restarts(caplog) == [f"{shard_folder.work_folder(out)}: earlier work was for {differs}: starting again"]
    assert stats["resumed_docs"] == 0 and stats["encoded_docs"] == stats["n_docs"] == 25
    assert stats["precision"] == ("bf16" if after.get("amx") else "fp32")
    straight_stats = _encode(model_dir, tmp_path / "straight", **after)
    assert _shards(out) == _shards(tmp_path / "straight") and stats["term_df"] == straight_stats["term_df"]
    if "amx" in after:  # bf16 and fp32 shards differ: the mix the key prevents would be real
        _encode(model_dir, tmp_path / "fp32")
        assert _shards(tmp_path / "straight") != _shards(tmp_path / "fp32")


def _retrain(model: Path) -> None:
    """New weights in the same files, of the same sizes, with the old modification times."""
    from transformers import BertForMaskedLM

    times = {p: p.stat().st_mtime_ns for p in model.iterdir()}
    retrained = BertForMaskedLM.from_pretrained(model)
    with torch.no_grad():
        for p in retrained.bert.encoder.parameters():
            p.add_(0.05 * torch.randn_like(p))
    retrained.save_pretrained(model)
    for p, ns in times.items():
        os.utime(p, ns=(ns, ns))
    assert {p: p.stat().st_mtime_ns for p in model.iterdir()} == times


def test_a_retrained_model_starts_again_and_a_copy_resumes(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = shutil.copytree(model_dir, tmp_path / "model")
    out = tmp_path / "c"
    _encode(model, out, interrupt_after=8)
    sizes = {p.name: p.stat().st_size for p in model.iterdir()}
    _retrain(model)
    assert {p.name: p.stat().st_size for p in model.iterdir()} == sizes
    with caplog.at_level(logging.INFO, logger=LOGGER):
        stats = _encode(model, out)
    assert stats["resumed_docs"] == 0
    assert len(restarts := _restarts(caplog)) == 1 and ": earlier work was for model=" in restarts[0]
    _encode(model, tmp_path / "straight")
    assert _shards(out) == _shards(tmp_path / "straight")

    # the same model copied elsewhere (new paths, new modification times) resumes where it stopped
    again = tmp_path / "again"
    _encode(model, again, interrupt_after=8)
    copy = shutil.copytree(model, tmp_path / "copied", copy_function=shutil.copyfile)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        stats = _encode(copy, again)
    assert stats["resumed_docs"] >= 2 * SHARD and not _restarts(caplog)
    assert _shards(again) == _shards(tmp_path / "straight")


def _reword_every_document(corpus: Path) -> None:
    """Every text changed in place; ids, order and count kept."""
    with gzip.open(corpus, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({**d, "text": "reworded " + d["text"]}) + "\n" for d in docs)


def test_a_local_corpus_edited_in_place_starts_again(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed, then the corpus file edited in place (same ids, same count: the last-id check cannot
    tell) and prepared again, as the workflow reruns prepare_corpus: the preparation's file digests are
    in the key, so no shard of the old texts is kept, and the result equals an uninterrupted run."""
    from splade_rescale.data.prepare import prepare_corpus, prepared_docs, prepared_files_digest

    folder = shutil.copytree(REPO / "resources" / "demo" / "scifact", tmp_path / "scifact")
    spec = {**SPEC, "path": str(folder)}
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    prepare_corpus("scifact", spec, before)
    out = tmp_path / "c"
    _encode(model_dir, out, spec=spec, interrupt_after=8, files_sha256=prepared_files_digest(before))
    _reword_every_document(folder / "corpus.jsonl.gz")
    prepare_corpus("scifact", spec, after)
    assert prepared_docs(after) == prepared_docs(before)
    assert prepared_files_digest(after) != prepared_files_digest(before)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        stats = _encode(model_dir, out, spec=spec, files_sha256=prepared_files_digest(after))
    assert stats["resumed_docs"] == 0
    assert len(restarts := _restarts(caplog)) == 1 and ": earlier work was for files=" in restarts[0], restarts
    _encode(model_dir, tmp_path / "straight", spec=spec, files_sha256=prepared_files_digest(after))
    assert _shards(out) == _shards(tmp_path / "straight")


@pytest.fixture()
def sample_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """The size guard judges the first two documents: fewer than a shard's three."""
    real = encode.encode_docs
    monkeypatch.setattr(encode, "encode_docs", lambda encoder, docs, out_dir, settings, *args, **kw: real(
        encoder, docs, out_dir, replace(settings, size_sample=2), *args, **kw))


def test_too_dense_on_resume_removes_the_work_folder(model_dir: Path, tmp_path: Path, sample_of_two) -> None:
    out = tmp_path / "c"
    _encode(model_dir, out, interrupt_after=8, budget_gb=100)
    with pytest.raises(size_guard.TooDenseError, match=r"^too dense to index \(estimated"):
        _encode(model_dir, out, budget_gb=1e-9)  # the same inputs; a budget the sample is over
    assert not shard_folder.work_folder(out).exists() and not out.exists()


def test_a_resumed_run_judges_the_same_sample(model_dir: Path, tmp_path: Path, sample_of_two) -> None:
    straight = _encode(model_dir, tmp_path / "straight", budget_gb=100)
    assert straight["size_estimate"]["sample_docs"] == 2
    out = tmp_path / "c"
    _encode(model_dir, out, interrupt_after=8, budget_gb=100)
    assert _encode(model_dir, out, budget_gb=100)["size_estimate"] == straight["size_estimate"]


def _cut_short(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "half": data[: len(data) // 2], "garbled": b"\x00" * len(data)}[how])


@pytest.mark.parametrize(
    "what,how",
    [("record", "empty"), ("record", "half"), ("df", "half"), ("df", "garbled"), ("state", "empty"), ("state", "half")],
)
def test_a_record_df_file_or_state_cut_short_is_unfinished(
    model_dir: Path, tmp_path: Path, what: str, how: str
) -> None:
    """After a node crash: the damaged shard and the later ones are encoded again (a bad state: all)."""
    straight = tmp_path / "straight"
    straight_stats = _encode(model_dir, straight)
    out = tmp_path / "c"
    _encode(model_dir, out, interrupt_after=8)
    work = shard_folder.work_folder(out)
    _cut_short(
        {
            "record": work / "records" / "docs-00001.json",
            "df": work / "records" / "docs-00001.df.npy",
            "state": work / "state.json",
        }[what],
        how,
    )
    stats = _encode(model_dir, out)
    assert stats["resumed_docs"] == (0 if what == "state" else SHARD)
    assert _shards(out) == _shards(straight) and not work.exists()
    assert stats["term_df"] == straight_stats["term_df"] and stats["n_docs"] == straight_stats["n_docs"]
    assert (
        json.loads(shard_folder.stats_path_for(out).read_text())["mean_nnz_per_doc"]
        == straight_stats["mean_nnz_per_doc"]
    )
