"""Trainer: recipes, a normal run and its log, collapse detection, data streams.

Resume after a kill: tests/test_reliability.py (the demo's MiniLM, one process, SIGTERM),
tests/training/test_train_distributed.py (two processes, SIGKILL) and
tests/training/test_train_resume.py (the workflow's train rule, whose failed job loses its
train_log.csv).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForMaskedLM

from conftest import TRIPLES
from splade_rescale.data.datasets import iter_triples_tsv
from splade_rescale.model.splade import uses_bf16
from splade_rescale.training.data import TrainingDataError, example_stream, load_teacher_scores
from splade_rescale.training.recipes import TrainingConfigError, resolve_recipe
from splade_rescale.training.train import LOG_COLUMNS
from support.training import TINY, save_tiny_bert, stored_dtypes, tiny_recipe, train_and_judge, training_paths


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("init"))


def test_resolve_recipe_applies_backbone_then_variant_overrides() -> None:
    config = {"recipes": {"tiny": TINY}, "variants": {"baseline": {}, "rescaled": {}},
              "training": {"recipe": "tiny", "data": TRIPLES,
                           "overrides": {"bert": {"lr": 0.5, "rescaled": {"lr": 0.25, "steps": 3}}}}}
    assert resolve_recipe(config, "bert", "baseline")["lr"] == 0.5
    rescaled = resolve_recipe(config, "bert", "rescaled")
    assert (rescaled["lr"], rescaled["steps"], rescaled["name"]) == (0.25, 3, "tiny")
    assert resolve_recipe(config, "other", "baseline")["lr"] == TINY["lr"]
    config["training"]["overrides"] = {"bert": {"rescaled": {"learning_rate": 1.0}}}
    with pytest.raises(TrainingConfigError, match=r"training.overrides.bert.rescaled: unknown recipe key"):
        resolve_recipe(config, "bert", "rescaled")


def test_shipped_recipes_resolve() -> None:
    for name in ("st-msmarco", "splade-pp", "demo-cpu"):
        recipe = resolve_recipe({"training": {"recipe": name, "data": TRIPLES}}, "b", "v")
        assert recipe["source"] and isinstance(recipe["lr"], float)


def test_normal_run_logs_and_records_ok(tiny_bert: Path, tmp_path: Path) -> None:
    paths = training_paths(tmp_path)
    manifest = train_and_judge(tiny_bert, recipe=tiny_recipe(), data_spec=TRIPLES, device="cpu", **paths)
    assert manifest["status"] == "ok" and manifest["steps_done"] == 6 and manifest["verdict"] is None
    assert min(manifest["sparsity"]["mean_nnz_q"], manifest["sparsity"]["mean_nnz_d"]) > 10 * 16  # far from the floors
    assert json.loads((tmp_path / "manifest.json").read_text())["status"] == "ok"
    assert json.loads(paths["record_path"].read_text())["status"] == "ok"
    with open(paths["log_csv"]) as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == LOG_COLUMNS and [int(r["step"]) for r in rows] == list(range(1, 7))
    # quadratic FLOPS warm-up over 4 steps, linear LR warm-up over 2 steps then linear decay
    assert [float(r["lambda_d"]) for r in rows[:5]] == pytest.approx([1e-3 * min(1, (t / 4) ** 2) for t in range(1, 6)])
    assert [float(r["lr"]) for r in rows] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3, 0.75e-3, 0.5e-3, 0.25e-3])
    assert all(float(r["nnz_q"]) > 0 and float(r["grad_norm"]) > 0 for r in rows)
    assert (tmp_path / "train.log").read_text().count("step ") >= 6
    AutoModelForMaskedLM.from_pretrained(paths["final_dir"])


@pytest.mark.parametrize("breakage,reason", [("nan", "non-finite"), ("zero", "all-zero"), ("dense", "near-dense")])
def test_broken_run_is_recorded_as_collapsed(tmp_path: Path, breakage: str, reason: str) -> None:
    bias = {"nan": -0.35, "zero": -1e4, "dense": 1e4}[breakage]
    init = save_tiny_bert(tmp_path / "init", decoder_bias=bias)
    if breakage == "nan":  # an injected NaN in the embeddings' LayerNorm
        model = AutoModelForMaskedLM.from_pretrained(init)
        with torch.no_grad():
            model.bert.embeddings.LayerNorm.weight[0] = float("nan")
        model.save_pretrained(init)
    paths = training_paths(tmp_path / "out")
    manifest = train_and_judge(init, recipe=tiny_recipe(steps=3, flops_warmup_steps=2), data_spec=TRIPLES, device="cpu",
                               **paths)
    assert manifest["status"] == "collapsed" and reason in manifest["reason"]
    # Non-finite stops at once; sparsity is judged after all steps, dating the collapse to when
    # the vectors became (and stayed) all-zero / near-dense: here from the start.
    assert (manifest["steps_done"], manifest["collapse_step"]) == ((1, 1) if breakage == "nan" else (3, 1))
    assert (paths["final_dir"] / "model.safetensors").exists()  # the last state is still written


# Steep enough to change the tiny head's sparsity within a few steps.
FAST = {"warmup_steps": 0, "flops_warmup_steps": 3, "checkpoint_every": 100}


def test_head_dense_at_init_that_training_sparsifies_is_ok(tmp_path: Path) -> None:
    """The artefact of a step-1 detector: a head dense at initialisation (as a large-norm head and
    its rescaled twin are) was stopped before the FLOPS regulariser had acted."""
    init = save_tiny_bert(tmp_path / "init", decoder_bias=0.3)
    paths = training_paths(tmp_path / "out")
    manifest = train_and_judge(init, recipe=tiny_recipe(**FAST, steps=10, lr=3.0e-2, lambda_q=1.0e-2, lambda_d=1.0e-2),
                               data_spec=TRIPLES, device="cpu", **paths)
    with open(paths["log_csv"]) as f:
        rows = list(csv.DictReader(f))
    assert all(float(r["nnz_d"]) > 0.5 * 30522 for r in rows[:5])  # near-dense for 5 steps ...
    assert float(rows[-1]["nnz_d"]) < 0.1 * 30522  # ... then the FLOPS regulariser sparsifies it
    assert manifest["status"] == "ok" and manifest["steps_done"] == 10
    assert manifest["sparsity"]["window_steps"] == [4, 10] and manifest["sparsity"]["mean_nnz_d"] < 0.5 * 30522


def test_run_that_goes_all_zero_after_warmup_is_collapsed(tmp_path: Path) -> None:
    init = save_tiny_bert(tmp_path / "init")  # sparse but not empty at initialisation
    paths = training_paths(tmp_path / "out")
    manifest = train_and_judge(init, recipe=tiny_recipe(**FAST, steps=10, lr=0.1, lambda_q=100.0, lambda_d=100.0,
                                                 collapse_window=3), data_spec=TRIPLES, device="cpu", **paths)
    with open(paths["log_csv"]) as f:
        rows = list(csv.DictReader(f))
    assert float(rows[0]["nnz_q"]) > 100
    assert manifest["status"] == "collapsed" and "all-zero" in manifest["reason"]
    assert manifest["steps_done"] == 10 and manifest["sparsity"]["window_steps"] == [8, 10]
    onset = manifest["collapse_step"]  # all-zero from here to the end, after the 3 warm-up steps
    assert 3 < onset <= 8 and all(float(r["nnz_q"]) < 1 for r in rows[onset - 1:])
    assert (paths["final_dir"] / "model.safetensors").exists()


def test_run_that_goes_near_empty_after_warmup_is_collapsed_with_its_reason(tmp_path: Path) -> None:
    """A strong FLOPS weight leaves a handful of terms per document (not zero): the state the x16
    stand-in reaches in the miniature, which the all-zero floor alone called ok."""
    init = save_tiny_bert(tmp_path / "init")
    paths = training_paths(tmp_path / "out")
    manifest = train_and_judge(init, recipe=tiny_recipe(**FAST, steps=12, lr=0.1, lambda_q=0.1, lambda_d=0.1,
                                                 collapse_window=3), data_spec=TRIPLES, device="cpu", **paths)
    with open(paths["log_csv"]) as f:
        rows = list(csv.DictReader(f))
    assert float(rows[0]["nnz_d"]) > 100  # a normal sparse start
    sparsity = manifest["sparsity"]
    assert 1.0 <= sparsity["mean_nnz_d"] < 16.0 and sparsity["mean_nnz_q"] >= 1.0  # near-empty, not all-zero
    assert manifest["status"] == "collapsed" and manifest["reason"].startswith("near-empty representations")
    assert manifest["verdict"] == f"near-empty: {sparsity['mean_nnz_d']:.1f} terms per document"
    assert 3 < manifest["collapse_step"] <= 10 and manifest["steps_done"] == 12


def test_bf16_checkpoint_trains_with_fp32_weights(tmp_path: Path) -> None:
    init = save_tiny_bert(tmp_path / "init")
    AutoModelForMaskedLM.from_pretrained(init).to(torch.bfloat16).save_pretrained(init)
    assert stored_dtypes(init) == {"BF16"}
    paths = training_paths(tmp_path / "out")
    manifest = train_and_judge(init, recipe=tiny_recipe(steps=1), data_spec=TRIPLES, device="cpu", **paths)
    assert stored_dtypes(paths["final_dir"]) == {"F32"}
    assert manifest["dtype"] == "float32" and not manifest["bf16_autocast"]


def test_stream_is_seeded_and_skips() -> None:
    first = [ex["query"] for _, ex in zip(range(130), example_stream(TRIPLES, seed=1, shuffle_buffer=16))]
    again = [ex["query"] for _, ex in zip(range(130), example_stream(TRIPLES, seed=1, shuffle_buffer=16))]
    skipped = [ex["query"] for _, ex in zip(range(30), example_stream(TRIPLES, seed=1, start=100, shuffle_buffer=16))]
    other = [ex["query"] for _, ex in zip(range(130), example_stream(TRIPLES, seed=2, shuffle_buffer=16))]
    assert first == again and skipped == first[100:] and first != other


def test_ir_datasets_source_streams_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = {"d1": "pos text", "d2": "neg text"}
    fake = SimpleNamespace(
        has_docpairs=lambda: True,
        docpairs_iter=lambda: iter([SimpleNamespace(query_id="q1", doc_id_a="d1", doc_id_b="d2")]),
        queries_iter=lambda: iter([SimpleNamespace(query_id="q1", text="a query")]),
        docs_store=lambda: SimpleNamespace(get=lambda d: SimpleNamespace(text=docs[d])))
    monkeypatch.setattr("ir_datasets.load", lambda ds_id: fake)
    ex = next(example_stream({"source": "ir_datasets", "id": "msmarco-passage/train/triples-small"}, seed=0))
    assert ex == {"qid": "q1", "query": "a query", "pos_id": "d1", "positive": "pos text",
                  "neg_ids": ["d2"], "negatives": ["neg text"]}
    with pytest.raises(TrainingDataError, match="examples"):
        next(example_stream({"source": "beir_local", "path": "x"}, seed=0))


def test_teacher_scores_are_exact_and_last_wins(tmp_path: Path) -> None:
    lines = [("1", "10", "0.5"), ("10", "1", "1.5"), ("1", "1", "2.5"), ("q-é", "doc-∑", "-3.25"),
             ("1", "10", "7.0"), ("a" * 40, "b", "1e3")]  # (1, 10) twice: the last score counts
    path = tmp_path / "teacher.tsv"
    path.write_text("".join("\t".join(line) + "\n" for line in lines), encoding="utf-8")
    teacher, expected = load_teacher_scores(path), {(q, d): float(v) for q, d, v in lines}
    assert len(teacher) == len(lines) and {k: teacher[k] for k in expected} == expected
    for missing in [("1", "0"), ("0", "10"), ("11", "0"), ("1", "10 "), ("a" * 41, "b"), ("", "")]:
        with pytest.raises(KeyError):
            teacher[missing]
    path.write_text("1\t2\t0.5\n3\t4\n")
    with pytest.raises(TrainingDataError, match=r"teacher.tsv:2: expected 'qid<TAB>docid<TAB>score'"):
        load_teacher_scores(path)
    path.write_text("1\t2\t0.5\n3\t4\thigh\n")
    with pytest.raises(TrainingDataError, match=r"teacher.tsv:2: score 'high' is not a number"):
        load_teacher_scores(path)


def test_distillation_trains_on_teacher_scores(tiny_bert: Path, tmp_path: Path) -> None:
    """margin_mse end to end: examples with ids, each (qid, docid) scored by the teacher file."""
    examples, teacher = tmp_path / "examples.jsonl", tmp_path / "teacher.tsv"
    with open(examples, "w") as ex, open(teacher, "w") as te:
        for i, (query, pos, neg) in enumerate(iter_triples_tsv(TRIPLES["path"])):
            ex.write(json.dumps({"qid": f"q{i}", "query": query, "pos_id": f"p{i}", "positive": pos,
                                 "neg_ids": [f"n{i}"], "negatives": [neg]}) + "\n")
            te.write(f"q{i}\tp{i}\t{10 + i % 3}\nq{i}\tn{i}\t{i % 5}\n")
    spec = {"source": "examples_jsonl", "path": str(examples)}
    recipe = tiny_recipe(steps=2, loss="margin_mse", teacher_scores=str(teacher))
    manifest = train_and_judge(tiny_bert, recipe=recipe, data_spec=spec, device="cpu",
                               **training_paths(tmp_path / "out"))
    assert manifest["status"] == "ok" and manifest["last_log"]["loss_rank"] > 0


@pytest.mark.parametrize("device,precision,amx,bf16", [
    ("cpu", "auto", False, False),   # an avx2-only CPU: bf16 matmuls ~100x slower than fp32
    ("cpu", "auto", True, True),     # AMX: bf16 is the faster path
    ("cuda", "auto", False, True),
    ("cpu", "fp32", True, False),
    ("cuda", "fp32", False, False),
    ("cpu", "bf16", False, True),
])
def test_auto_precision_is_bf16_on_cuda_and_on_amx_cpus_only(device: str, precision: str, amx: bool,
                                                             bf16: bool) -> None:
    assert uses_bf16(torch.device(device), precision, amx=amx) is bf16


def test_auto_precision_on_this_cpu_follows_its_amx_flag_in_the_manifest(tmp_path: Path) -> None:
    init = save_tiny_bert(tmp_path / "init")
    manifest = train_and_judge(init, recipe={**tiny_recipe(steps=1), "precision": "auto"}, data_spec=TRIPLES,
                               device="cpu", **training_paths(tmp_path / "out"))
    # the machine's own flag, read apart from the code under test: the kernel's list of CPU features
    flags = {f for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
             for f in line.split(":", 1)[1].split()}
    assert manifest["bf16_autocast"] is ("amx_tile" in flags and "amx_bf16" in flags)
    assert manifest["status"] == "ok"
