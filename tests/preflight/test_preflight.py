"""The preflight end to end on this CPU with the demo config: real checks, the run's own encode and
training timed, splade-tiny's parity, and the plan priced with the figures measured here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splade_rescale.costs.plan import MEASURED_NAME
from splade_rescale.costs.schedule import plan_run
from splade_rescale.preflight.findings import Finding
from splade_rescale.preflight.page import Budget, _stage, render_page, run_preflight

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "config" / "demo.yaml"


@pytest.fixture(scope="module")
def preflight(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, Path]:
    results = tmp_path_factory.mktemp("preflight")
    page, data = run_preflight(DEMO, cores=2, gpus=1, budget=Budget(seconds=1, train_steps=2, parity_docs=100),
                               root=REPO, results=results)
    return page, data, results


def test_the_demo_preflight_checks_measures_and_prices_this_machine(preflight: tuple[str, dict, Path]) -> None:
    page, data, results = preflight
    assert (results / "preflight.md").read_text() == page
    checks = {f["check"] for f in data["findings"]}
    assert {"torch", "jvm", "disk", "memory", "downloads", "parity", "train bert"} <= checks
    assert not [f for f in data["findings"] if f["ok"] is False], data["findings"]
    measured = json.loads((results / MEASURED_NAME).read_text())
    bert = measured["architectures"]["bert"]  # MiniLM, the demo's backbones' architecture
    assert bert["backbone"] == "minilm" and bert["parameters"] > 20e6
    assert bert["encode_docs_per_s"] > 0 and 20 < bert["encode_tokens_per_doc"] <= 64  # doc_max_length 64
    assert bert["train_queries_per_s"] > 0 and bert["train"]["status"] == "ok"
    assert bert["train"]["compiled"] is False and "eager" in bert["encode"]  # a CPU never compiles
    assert page.rstrip().endswith("**GO**: every check passed.")
    assert "bert: measured here" in (results / "plan.md").read_text()


def test_the_plan_takes_the_measured_figures_in_place_of_the_shipped_ones(preflight: tuple[str, dict, Path]) -> None:
    _, data, results = preflight
    shipped, text = plan_run(DEMO, None, 2, 1, root=REPO, measured=results / "absent.json")
    assert "bert: shipped" in text
    here = data["plan"]
    # this CPU encodes and trains slower than the shipped H200 figures (the demo's GPU-hours are mostly job starts)
    assert here["totals"]["encode_gpu_h"] > shipped["totals"]["encode_gpu_h"]
    assert here["totals"]["train_gpu_h"] > shipped["totals"]["train_gpu_h"]
    assert here["throughput_sources"]["bert"].startswith("measured here")


def test_a_failing_stage_is_a_line_of_the_page_and_the_verdict_names_its_fix() -> None:
    findings = [Finding("disk", True, "/x: 80 GB free")]

    def broken() -> None:
        raise FileNotFoundError("backbones.minilm: no model at /nowhere; fix: point path at a model folder")

    assert _stage("measure", findings, broken) is None
    page = render_page({"config": "c.yaml", "device": "cpu", "cores": 2, "gpus": 1, "seconds": 1.0}, findings)
    assert "| measure | FAIL | FileNotFoundError: backbones.minilm: no model at /nowhere" in page
    assert page.rstrip().endswith("**NO-GO**: fix first: measure: FileNotFoundError: backbones.minilm: no model at "
                                  "/nowhere; fix: point path at a model folder")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA torch reaches its GPU")
def test_device_cuda_on_a_torch_without_cuda_measures_nothing_and_says_so() -> None:
    from splade_rescale.preflight.page import _device

    with pytest.raises(RuntimeError, match="device: cuda, and torch .* reaches no CUDA GPU here: nothing measured"):
        _device("cuda")


def test_parity_fails_past_its_tolerance_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 against fp32 on this CPU, judged at a tolerance no difference meets: the failing line and its fix."""
    import torch

    from splade_rescale.preflight import parity

    monkeypatch.setattr(parity, "TOLERANCE", -1.0)
    report, finding = parity.check_parity(torch.device("cpu"), "bf16", tmp_path, limit=20)
    assert report["passages"] == 20 and report["bf16"] and "cpu_fp32_metrics" in report
    assert finding.ok is False and "fix: the device's numerics differ from the CPU's" in finding.line
