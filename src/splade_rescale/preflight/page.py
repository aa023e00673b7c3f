"""The preflight as one run and one page: the environment against the plan, this machine's throughput,
the device's parity, optionally the side-by-side with sentence-transformers, then the plan again with
the measured figures, ending with the wall time here and what to fix first.

A stage that fails becomes a failing line on the page, not a crash: the stages before it keep their
findings, and the measured figures are written as soon as they exist.
"""

from __future__ import annotations

import datetime
import logging
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from splade_rescale.atomic import write_json
from splade_rescale.config import load_config
from splade_rescale.costs.plan import MEASURED_NAME
from splade_rescale.costs.schedule import plan_run
from splade_rescale.model.splade import resolve_device
from splade_rescale.preflight.environment import environment_checks
from splade_rescale.preflight.findings import Finding
from splade_rescale.preflight.measure import measure, pool_passages
from splade_rescale.preflight.parity import check_parity
from splade_rescale.preflight.peer import PeerSizes, compare_with_sentence_transformers

log = logging.getLogger(__name__)

CPU_PARITY_DOCS = 2000  # pool passages the parity check encodes (twice) where the device is the CPU: a minute or two


def _stage(name: str, findings: list[Finding], step: Callable[[], Any]) -> Any:
    """Run one stage; its exception becomes one failing line (the traceback goes to the log)."""
    try:
        return step()
    except Exception as exc:  # noqa: BLE001  (any failure of a stage is a finding, not the end of the page)
        log.debug("%s failed:\n%s", name, traceback.format_exc())
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        findings.append(Finding(name, False, f"{type(exc).__name__}: {first}"))
        return None


@dataclass(frozen=True)
class Budget:
    """How long the preflight measures: timed encoding per architecture (s), timed training steps, the pool
    passages of the parity check (None: all on a GPU, :data:`CPU_PARITY_DOCS` on a CPU), and whether it also
    times sentence-transformers side by side."""

    seconds: float = 30
    train_steps: int = 8
    parity_docs: int | None = None
    versus: bool = False


def run_preflight(configfile: str | Path, cores: int, gpus: int, budget: Budget = Budget(), root: str | Path = ".",
                  results: Path | None = None) -> tuple[str, dict]:
    """Check, measure and price this machine for ``configfile``; write ``preflight.md`` and ``.json``,
    ``throughputs.measured.json`` and the plan with them in ``results`` (default ``results/{experiment}/``);
    return the page and its data."""
    started = time.perf_counter()
    root = Path(root)
    config = load_config(configfile)
    results = results or root / "results" / config["experiment"]
    findings: list[Finding] = []
    plan = _stage("plan", findings, lambda: plan_run(configfile, None, cores, gpus, root=root,
                                                     measured=results / MEASURED_NAME)[0])
    if plan is not None:
        findings += environment_checks(config, plan, results)
    device = config.get("device", "auto")
    dev = _stage("device", findings, lambda: _device(device))
    data: dict[str, Any] = {"config": str(configfile), "device": str(dev or device), "cores": cores, "gpus": gpus}
    if dev is not None:  # else nothing to measure on: the checks above say why
        largest = max((c["count"] for c in plan["corpora"].values()), default=0) if plan else None
        with tempfile.TemporaryDirectory(prefix="preflight-") as tmp:
            work = Path(tmp)
            measured = _stage("measure", findings, lambda: measure(config, dev, largest, budget.seconds,
                                                                   budget.train_steps, work, root))
            if measured:  # written at once: a later stage's failure loses nothing
                write_json(results / MEASURED_NAME, measured)
                data["measured"] = measured
                findings += [_trained(a, f["train"]) for a, f in measured["architectures"].items()]
            limit = budget.parity_docs if budget.parity_docs is not None else (
                None if dev.type == "cuda" else CPU_PARITY_DOCS)
            parity = _stage("parity", findings, lambda: check_parity(dev, config["encoding"]["precision"],
                                                                      work / "parity", limit))
            if parity:
                data["parity"] = parity[0]
                findings.append(parity[1])
            if budget.versus and measured:
                data["versus"] = _stage("versus", findings, lambda: _versus(config, dev, work, measured))
    final = _stage("plan", findings, lambda: plan_run(configfile, None, cores, gpus, results / "plan.md", root,
                                                       results / MEASURED_NAME))
    data.update(findings=[f.__dict__ for f in findings], plan=final[0] if final else None,
                seconds=round(time.perf_counter() - started, 1))
    page = render_page(data, findings)
    results.mkdir(parents=True, exist_ok=True)
    (results / "preflight.md").write_text(page)
    write_json(results / "preflight.json", data)
    return page, data


def _device(device: str) -> torch.device:
    """The device the run's model jobs use here; a CUDA that torch cannot reach is a failure, not a CPU run."""
    dev = resolve_device(None if device == "auto" else device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device: {device}, and torch {torch.__version__} reaches no CUDA GPU here: nothing "
                           "measured; fix: the torch check above")
    return dev


def _trained(architecture: str, train: Mapping[str, Any]) -> Finding:
    return Finding(f"train {architecture}", train["status"] == "ok", f"training {train['status']} after "
                   f"{train['steps']} timed steps, {'compiled' if train['compiled'] else 'eager'} as the run's")


def _versus(config: Mapping[str, Any], dev: torch.device, work: Path, measured: Mapping[str, Any]) -> dict:
    """The side-by-side on the first measured backbone: the GPU's shapes on a GPU; on a CPU small ones, which
    finish in minutes (their ratios are not the GPU's)."""
    name = next(iter(measured["architectures"].values()))["backbone"]
    texts = [t for _, t in pool_passages()]
    cuda = dev.type == "cuda"
    return compare_with_sentence_transformers(
        work / name / "model", texts if cuda else texts[:256], str(dev), config["encoding"]["precision"],
        work / "versus", sizes=PeerSizes() if cuda else PeerSizes(batch=32, queries=8, steps=3, warmup=1))


def _measured_rows(measured: Mapping[str, Any]) -> list[str]:
    rows = ["| architecture | backbone | encode docs/s (tokens/doc) | compiled / eager | train queries/s "
            "(tokens/query) |", "|---|---|---|---|---|"]
    for arch, f in measured["architectures"].items():
        enc = f["encode"]
        compiled = f"{enc['compiled']:,.0f} / {enc['eager']:,.0f}" if "compiled" in enc else "not compiled"
        rows.append(f"| {arch} | {f['backbone']} | {f['encode_docs_per_s']:,.1f} ({f['encode_tokens_per_doc']:.0f}) "
                    f"| {compiled} | {f['train_queries_per_s']:,.2f} ({f['train_tokens_per_query']:.0f}) |")
    return rows


def _versus_rows(versus: Mapping[str, Any]) -> list[str]:
    rows = ["| figure | value | target | met |", "|---|---|---|---|"]
    for name, t in versus.get("targets", {}).items():
        value = t.get("value")
        rows.append(f"| {name} | {'n/a' if value is None else f'{value:.3g}'} | {t.get('target', '')} "
                    f"| {t.get('met', 'pending')} |")
    return rows


def _totals(t: Mapping[str, Any] | None) -> list[str]:
    if not t:
        return ["No bill: the plan failed (see the checks)."]
    return ["| total | |", "|---|---|", f"| GPU-hours, training | {t['train_gpu_h']:,.2f} |",
            f"| GPU-hours, encoding | {t['encode_gpu_h']:,.2f} |",
            f"| CPU core-hours, indexing and retrieval | {t['index_core_h'] + t['retrieve_core_h']:,.2f} |",
            f"| peak disk (GB) | {t['peak_bytes'] / 1e9:,.1f} |"]


def render_page(data: Mapping[str, Any], findings: list[Finding]) -> str:
    """The page: findings, figures, the bill with the measured figures, and the verdict last."""
    failing = [f for f in findings if f.ok is False]
    lines = [f"# Preflight: {data['config']}", "",
             f"{datetime.date.today()}, device {data['device']}, {data['cores']} cores, {data['gpus']} GPU(s) planned; "
             f"the preflight took {data['seconds']:.0f} s.", "", "## Checks", "", "| check | | what was seen |",
             "|---|---|---|"]
    lines += [f"| {f.check} | {f.mark} | {f.line.replace('|', '/')} |" for f in findings]
    if data.get("measured"):
        m = data["measured"]
        lines += ["", f"## Measured here ({m['device']}, host 1-thread fp32 matmul {m['matmul_gflops_1thread']} "
                  f"GFLOPS; torch {m['software']['torch']})", "", *_measured_rows(m),
                  "", f"Written to `{MEASURED_NAME}` beside this page: the plan below uses these figures."]
    if data.get("versus"):
        lines += ["", "## Against sentence-transformers (same model, texts, device, precision)", "",
                  *_versus_rows(data["versus"])]
    schedule = (data.get("plan") or {}).get("schedule")
    lines += ["", "## The bill on this machine", "", *_totals((data.get("plan") or {}).get("totals")), "",
              "Every model's figures, the data, memory, jobs and the schedule: `plan.md` beside this page.",
              "", "## Verdict", ""]
    if schedule:
        lines.append(f"Wall time of the whole run on this machine: **{schedule['wall_h']:,.1f} h** "
                     f"({schedule['gpus']} GPU(s), {schedule['cores']} cores)"
                     + (", with the figures measured above." if data.get("measured") else
                        ", priced with the shipped figures: nothing was measured here."))
    else:
        lines.append("No GPU schedule: the model jobs run on the CPU here; the bill's GPU-hours are CPU-hours at "
                     "the speed measured above.")
    lines.append("")
    lines.append(f"**NO-GO**: fix first: {failing[0].check}: {failing[0].line}" if failing
                 else "**GO**: every check passed.")
    return "\n".join(lines) + "\n"
