"""benchmarks/gpu_acceptance.py: its CPU mode end to end (so the GPU script cannot rot between GPU
runs) and the comparisons that decide PASS or FAIL."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_acceptance.py"
sys.path.insert(0, str(SCRIPT.parent))
import gpu_acceptance as ga  # noqa: E402

CORRECTNESS = ("train_bf16_loss_vs_fp32_cpu", "train_params_stay_fp32", "encode_bf16_passages_vs_fp32_cpu",
               "encode_bf16_queries_vs_fp32_cpu", "no_pyserini_jsonschema_imports")
TARGETS = ("encode_speedup", "encode_frac_peak", "train_speedup", "train_mem_ratio")


@pytest.mark.skipif(torch.cuda.is_available(), reason="its expectations are those of a machine without a GPU")
def test_cpu_mode_runs_every_stage_and_passes(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cpu", "--tiny", "--out", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(out.read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert report["result"] == "PASS" and report["mode"] == "cpu tiny"
    for name in CORRECTNESS:
        assert checks[name]["status"] == "PASS", checks[name]
    # Without CUDA the CUDA-only tests are found and skipped: a rename that hid them would fail here.
    cuda = report["stages"]["cuda_tests"]
    assert checks["cuda_tests"]["status"] == "INFO" and cuda["tests"] >= 2 and cuda["skipped"] == cuda["tests"]
    assert "tests/model/test_fused_head.py" in cuda["files"]
    assert all("test_cuda_autocast_matches_naive" in test for test in cuda["selected"])
    # Speed targets are measured at both shapes but never judged on a CPU.
    for backbone in ("modernbert-base", "bert-base"):
        for target in TARGETS:
            check = checks[f"{target}@{backbone}"]
            assert check["status"] == "INFO"
            assert (check["value"] is None) == (target == "train_mem_ratio")
        assert report["stages"][f"bench_{backbone}"]["shapes"]["backbone"] == f"{backbone} (tiny)"
    runs = report["stages"]["train"]["runs"]
    steps = report["sizes"]["train_steps"]
    assert runs["bf16-cpu"]["bf16_autocast"] and not runs["fp32-cpu"]["bf16_autocast"]
    assert len(runs["bf16-cpu"]["losses"]) == len(runs["fp32-cpu"]["losses"]) == steps
    assert runs["bf16-cpu"]["losses"] != runs["fp32-cpu"]["losses"]  # bf16 really ran: not bit-identical
    assert set(report["versions"]) >= {"torch", "transformers", "sentence-transformers", "python"}
    assert "Lucene" in report["not_run"][0]
    # The encode and train targets: every figure measured, none judged without CUDA.
    assert set(report["targets"]) == {"encode_real_speedup", "encode_fixed_speedup", "encode_frac_peak",
                                      "encode_e2e_over_forward", "train_speedup"}
    for name, target in report["targets"].items():
        assert target["value"] > 0 and str(target["met"]).startswith("pending"), (name, target)
    real = report["stages"]["encode_end_to_end"]["real"]
    for corpus in ("msmarco", "scifact"):  # real texts, ours and sentence-transformers' encode_document
        assert real[corpus]["ours_s"] > 0 and real[corpus]["sentence_transformers_s"] > 0
        assert 0 <= real[corpus]["padding_share"]["bucketed"] <= real[corpus]["padding_share"]["char_sorted"]
    for name, check in checks.items():
        assert f"{check['status']:<5} {name}" in proc.stdout
    assert "RESULT PASS" in proc.stdout


def test_gpu_mode_without_cuda_stops_with_one_line(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(SystemExit, match="no CUDA device visible; use --cpu --tiny"):
        ga.main(["--out", str(tmp_path / "r.json")])
    assert not (tmp_path / "r.json").exists()


def test_compare_vectors_tolerates_ties_but_not_wrong_weights() -> None:
    ref = torch.tensor([[0.0, 1.0, 0.9, 0.5, 0.2, 0.0], [0.3, 0.0, 0.0, 0.8, 0.1, 0.6]])
    assert ga.compare_vectors(ref, ref.clone(), atol=0.05, k=2)["ok"]
    swapped = ref.clone()
    swapped[0, 2], swapped[0, 3] = 0.5, 0.53  # weights off by up to 0.4: the 2nd term changes
    r = ga.compare_vectors(ref, swapped, atol=0.05, k=2)
    assert not r["ok"] and "weights differ" in r["why"] and "top-2 term" in r["why"]
    tie = ref.clone()
    tie[0, 1], tie[0, 2] = 0.95, 0.97  # a swap among terms within the tolerance is still "the same top terms"
    r = ga.compare_vectors(ref, tie, atol=0.12, k=1)
    assert r["ok"] and r["top_k_overlap"] == 0.5
    empty = ref.clone()
    empty[1] = 0
    assert "empty" in ga.compare_vectors(empty, empty, atol=0.05, k=2)["why"]
    assert not ga.compare_vectors(ref, ref[:, :4], atol=0.05, k=2)["ok"]


def test_compare_losses() -> None:
    ok, worst, _ = ga.compare_losses([2.0, 1.0], [2.01, 0.995], rtol=0.02)
    assert ok and worst == pytest.approx(0.005)
    assert not ga.compare_losses([2.0, 1.0], [2.0, 1.05], rtol=0.02)[0]
    ok, worst, why = ga.compare_losses([2.0, 1.0], [2.0, math.nan], rtol=0.02)
    assert not ok and "non-finite" in why
    assert not ga.compare_losses([2.0, 1.0], [2.0], rtol=0.02)[0]


def test_pin_differences_ignore_local_tags(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nrequires-python = ">=3.11,<3.12"\ndependencies = ["torch==2.13.0", '
                         '"transformers==5.24.0", "sentence-transformers==6.2.0", "pyyaml==6.0.4"]\n')
    same = {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0", "sentence-transformers": "6.2.0"}
    assert ga.pin_differences(same, pyproject) == {}
    device = {"python": "3.12.3", "torch": "2.11.0+cu130", "transformers": "5.17.0", "sentence-transformers": "6.0.1"}
    assert ga.pin_differences(device, pyproject) == {
        "torch": {"pinned": "2.13.0", "ran": "2.11.0+cu130"}, "transformers": {"pinned": "5.24.0", "ran": "5.17.0"},
        "sentence-transformers": {"pinned": "6.2.0", "ran": "6.0.1"},
        "python": {"pinned": ">=3.11,<3.12", "ran": "3.12.3"}}


def test_offline_tokenizer_splits_unseen_words_without_unk() -> None:
    tok = ga.wordpiece_tokenizer(["Caffeine during pregnancy.", "what fruit is native"], 64)
    ids = tok("caffeine and a vein fruit")["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]" and "caffeine" in pieces and "fruit" in pieces
    assert tok.unk_token_id not in ids and "##e" in pieces  # an unseen word falls back to its characters
    assert ids[0] == ga.CLS_ID and ids[-1] == ga.SEP_ID and tok.pad_token_id == ga.PAD_ID
