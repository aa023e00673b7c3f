"""Training data prepared in a CPU job: the trainer reads exactly the examples it streamed before.

The GPU job used to stream the source itself (for MS MARCO: ir_datasets' first use downloads
7.9 GB and builds its caches inside it). Now ``prepare_examples`` writes the run's examples to a
local file and the trainer reads that file; these tests train the same recipe both ways and
compare what the trainer consumed, for the shared MS MARCO triples sample and for an
ir_datasets source (a monkeypatched dataset that refuses any use once the file is prepared).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import splade_rescale.training.train as train
from conftest import TRIPLES
from splade_rescale.training.data import (
    TrainingDataError,
    examples_read,
    prepare_examples,
    prepared_meta_path,
    run_stream,
    stream_name,
    training_stream,
)
from support.training import save_tiny_bert, tiny_recipe, training_paths

IRDS = {"source": "ir_datasets", "id": "msmarco-passage/train/triples-small"}


class FakeIrds:
    """An ir_datasets dataset of 60 doc pairs over 40 documents; ``closed`` makes any use fail."""

    closed = False

    def _open(self) -> None:
        if FakeIrds.closed:
            raise AssertionError("ir_datasets used after the examples were prepared")

    def has_docpairs(self) -> bool:
        return True

    def docpairs_handler(self):  # not triples-small's pair Cache: examples come from docpairs_iter
        self._open()
        return SimpleNamespace()

    def docpairs_iter(self):
        self._open()
        return iter([SimpleNamespace(query_id=f"q{i % 30}", doc_id_a=f"d{i % 40}", doc_id_b=f"d{(i * 7 + 3) % 40}")
                     for i in range(60)])

    def queries_iter(self):
        self._open()
        return iter([SimpleNamespace(query_id=f"q{i}", text=f"query {i} about topic {i % 7}") for i in range(30)])

    def docs_store(self):
        self._open()
        return SimpleNamespace(get=lambda d: SimpleNamespace(text=f"passage {d} with words {d[1:]} and more"))


@pytest.fixture()
def fake_irds(monkeypatch: pytest.MonkeyPatch) -> FakeIrds:
    monkeypatch.setattr("ir_datasets.load", lambda ds_id: FakeIrds())
    FakeIrds.closed = False
    return FakeIrds()


@pytest.fixture(scope="module")
def tiny_init(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("init"))


def _consumed(monkeypatch: pytest.MonkeyPatch, init: Path, out: Path, recipe: dict[str, Any],
              spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Train ``recipe`` on ``spec``; return every example the trainer took from its stream."""
    seen: list[dict[str, Any]] = []

    def recording(*args: Any, **kwargs: Any):
        for ex in training_stream(*args, **kwargs):
            seen.append(json.loads(json.dumps(ex)))
            yield ex

    monkeypatch.setattr(train, "training_stream", recording)
    manifest = train.run_training(init, recipe=recipe, data_spec=spec, device="cpu", **training_paths(out))
    assert manifest["status"] in ("ok", "collapsed") and manifest["steps_done"] == recipe["steps"]
    return seen


@pytest.mark.parametrize("source", ["tsv_triples", "ir_datasets"])
def test_training_reads_the_same_examples_from_the_prepared_file(
        source: str, tiny_init: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """13 steps of 8 queries in micro-batches of 4: 104 examples, past the end of the 100-triple
    sample (the stream cycles into its second, reshuffled epoch) and of the 60 fake pairs."""
    if source == "ir_datasets":
        monkeypatch.setattr("ir_datasets.load", lambda ds_id: FakeIrds())
        FakeIrds.closed = False
    spec = TRIPLES if source == "tsv_triples" else IRDS
    recipe = tiny_recipe(steps=13, batch_size=8, grad_accumulation=2, shuffle_buffer=16, seed=3)
    before = _consumed(monkeypatch, tiny_init, tmp_path / "before", recipe, spec)
    assert len(before) == examples_read(recipe) == 13 * 8  # not x grad_accumulation: batch_size is per step

    stream = run_stream(recipe)
    out = tmp_path / "examples" / f"{stream_name(stream)}.jsonl"
    record = prepare_examples(spec, stream, out)
    assert record["examples"] == 104 and len(out.read_text().splitlines()) == 104
    FakeIrds.closed = True  # from here on any ir_datasets use fails
    after = _consumed(monkeypatch, tiny_init, tmp_path / "after", recipe, {**spec, "prepared": str(out)})
    assert after == before
    # a resumed run (checkpoint at step 10) reads the same tail
    tail = list(training_stream({**spec, "prepared": str(out)}, recipe, start=10 * 8))
    assert tail == before[80:]


def test_a_prepared_file_for_another_stream_or_too_short_is_refused(fake_irds: FakeIrds, tmp_path: Path) -> None:
    recipe = tiny_recipe(steps=3, batch_size=4, seed=1)
    out = tmp_path / "ex.jsonl"
    prepare_examples(IRDS, run_stream(recipe), out)
    FakeIrds.closed = True
    spec = {**IRDS, "prepared": str(out)}
    assert len(list(training_stream(spec, recipe))) == 12

    with pytest.raises(TrainingDataError, match=r"ex.jsonl: prepared for another stream \(seed differ"):
        next(training_stream(spec, {**recipe, "seed": 2}))
    with pytest.raises(TrainingDataError, match=r"ex.jsonl: holds 12 examples but this run reads 16 "
                                                r"\(steps x batch_size\); prepare it again"):
        next(training_stream(spec, {**recipe, "steps": 4}))
    with pytest.raises(TrainingDataError, match="data differ"):
        next(training_stream({**spec, "id": "msmarco-passage/train/judged"}, recipe))
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:5]) + "\n")  # cut short after it was recorded
    with pytest.raises(TrainingDataError, match=r"ex.jsonl: ends after 5 examples \(its record says 12\)"):
        list(training_stream(spec, recipe))
    prepared_meta_path(out).unlink()
    with pytest.raises(TrainingDataError, match=r"not found; prepare it again \(snakemake reruns prepare_training"):
        next(training_stream(spec, recipe))


def test_prepared_examples_carry_the_teacher_scores(fake_irds: FakeIrds, tmp_path: Path) -> None:
    """Distillation: the scores are attached when preparing, so the GPU job never loads the
    (tens of millions of pairs) teacher file; a contrastive recipe's stream ignores the file."""
    teacher = tmp_path / "teacher.tsv"
    teacher.write_text("".join(f"q{q}\td{d}\t{q + d / 100}\n" for q in range(30) for d in range(40)))
    recipe = tiny_recipe(steps=2, batch_size=4, loss="margin_mse", teacher_scores=str(teacher))
    stream = run_stream(recipe)
    assert stream["teacher_scores"] == str(teacher) and "-teacher" in stream_name(stream)
    assert run_stream({**recipe, "loss": "contrastive"})["teacher_scores"] is None
    streamed = json.loads(json.dumps(list(itertools.islice(training_stream(IRDS, recipe), 8))))  # as train read them
    out = tmp_path / "ex.jsonl"
    prepare_examples(IRDS, stream, out)
    FakeIrds.closed = True
    teacher.unlink()
    got = list(training_stream({**IRDS, "prepared": str(out)}, recipe))
    assert got == streamed and len(got) == 8
    assert [ex["teacher"] for ex in got] == [
        pytest.approx([int(ex["qid"][1:]) + int(d[1:]) / 100 for d in [ex["pos_id"], *ex["neg_ids"]]]) for ex in got]
