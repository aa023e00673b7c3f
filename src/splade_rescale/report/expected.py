"""Expected scores as data, as Pyserini's reproduction (2CR) files keep theirs.

One YAML file per experiment (``config/expected/demo.yaml``) names, for every trained run, its
training status and, for a working model, one dataset's nDCG@10 and mean non-zeros per document,
with the tolerance a rerun on another machine must meet. The figures are kept per training
precision (``fp32``, ``bf16``): ``precision: auto`` trains in bf16 autocast on a CPU with AMX and in
fp32 on others, and a short run that sits near a collapse moves by more than any sensible tolerance
between the two, so a rerun is held to the figures of the precision it trained in (its manifest's
``bf16_autocast``). Untrained systems, BM25 and published checkpoints (``untrained``, by their
metrics folder: ``bm25``, ``{model}/published``), have one set of figures per dataset whatever the
CPU trains in, so that a newcomer sees the trained runs beside them.

:func:`check` compares a finished results folder with it; :func:`render` is the
Markdown table the README and docs show, and :func:`rewrite_block` keeps their copies equal to the file.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

BEGIN, END = "<!-- expected-scores:begin {name} -->", "<!-- expected-scores:end {name} -->"
PRECISIONS = ("fp32", "bf16")
UNTRAINED = "untrained"


class ExpectedError(ValueError):
    """An expected-scores file that cannot be used; one line naming the file and key."""


def load_expected(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    data = yaml.safe_load(path.read_text()) or {}
    for key in ("dataset", "tolerance", "runs"):
        if key not in data:
            raise ExpectedError(f"{path}: missing key {key!r}")
    if not data["runs"] or not set(data["runs"]) <= set(PRECISIONS):
        raise ExpectedError(f"{path}: runs must be keyed by training precision ({', '.join(PRECISIONS)}), "
                            f"not {', '.join(map(str, data['runs'])) or 'nothing'}")
    for precision, runs in data["runs"].items():
        for run, row in runs.items():
            key = f"runs.{precision}.{run}"
            if row.get("status") not in ("ok", "collapsed"):
                raise ExpectedError(f"{path}: {key}.status must be ok or collapsed, not {row.get('status')!r}")
            if row["status"] == "ok" and not {"ndcg_10", "nnz_per_doc"} <= set(row):
                raise ExpectedError(f"{path}: {key} is ok but lacks ndcg_10 or nnz_per_doc")
    for system, datasets in (data.get(UNTRAINED) or {}).items():
        for dataset, row in (datasets or {}).items():
            if "ndcg_10" not in (row or {}):
                raise ExpectedError(f"{path}: {UNTRAINED}.{system}.{dataset} lacks ndcg_10")
    return data


def run_names(expected: Mapping[str, Any]) -> list[str]:
    """Every run the file names, under any precision, in the order it first names them."""
    return list(dict.fromkeys(run for runs in expected["runs"].values() for run in runs))


def measured(results: str | Path, run: str, dataset: str) -> dict[str, Any]:
    """Training precision, status, verdict, nDCG@10 and non-zeros per document of ``run``
    ("backbone/variant") from its manifest and its backbone's summary (results/{experiment}/)."""
    backbone, variant = run.split("/", 1)
    manifest = json.loads((Path(results) / "models" / backbone / variant / "manifest.json").read_text())
    summary = json.loads((Path(results) / "summary" / f"{backbone}.json").read_text())
    entry = summary["variants"][variant]
    out = {"precision": "bf16" if manifest.get("bf16_autocast") else "fp32",
           "status": entry["training"]["status"], "verdict": entry["training"].get("verdict")}
    if out["status"] == "ok":
        scores = entry["datasets"][dataset]
        out["ndcg_10"] = scores["metrics"]["nDCG@10"]
        out["nnz_per_doc"] = scores["efficiency"]["mean_nnz_per_doc"]
    return out


def check(expected: Mapping[str, Any], results: str | Path) -> list[str]:
    """One line per run outside the expected figures (empty: every run as expected)."""
    tol, dataset, problems = expected["tolerance"], expected["dataset"], []
    for run in run_names(expected):
        got = measured(results, run, dataset)
        want = expected["runs"].get(got["precision"], {}).get(run)
        if want is None:
            problems.append(f"{run}: trained in {got['precision']}, for which the file has no figures")
            continue
        if got["status"] != want["status"]:
            problems.append(f"{run}: status {got['status']} ({got['verdict']}), expected {want['status']}")
            continue
        if want["status"] == "collapsed":
            if want.get("verdict") and not str(got["verdict"] or "").startswith(want["verdict"]):
                problems.append(f"{run}: verdict {got['verdict']!r}, expected {want['verdict']!r}")
            continue
        if not abs(got["ndcg_10"] - want["ndcg_10"]) <= tol["ndcg_10"]:
            problems.append(f"{run}: {dataset} nDCG@10 {got['ndcg_10']:.3f}, expected {want['ndcg_10']:.3f} "
                            f"+- {tol['ndcg_10']}")
        if not abs(math.log(got["nnz_per_doc"] / want["nnz_per_doc"])) <= math.log(tol["nnz_per_doc"]):
            problems.append(f"{run}: {got['nnz_per_doc']:.0f} non-zeros per document, expected "
                            f"{want['nnz_per_doc']} within x/{tol['nnz_per_doc']}")
    for system, datasets in (expected.get(UNTRAINED) or {}).items():
        for dataset, want in datasets.items():
            problems += _check_untrained(Path(results) / "metrics" / system / f"{dataset}.json", system, dataset,
                                         want, tol)
    return problems


def _check_untrained(path: Path, system: str, dataset: str, want: Mapping[str, Any],
                     tol: Mapping[str, float]) -> list[str]:
    """An untrained system's metrics file against its figures (one line per problem)."""
    if not path.is_file():
        return [f"{system}: no {path} (was it run?)"]
    got = json.loads(path.read_text())
    if got.get("status", "ok") != "ok" or not got.get("metrics"):
        return [f"{system}: {dataset} status {got.get('status')}, expected ok"]
    problems, ndcg = [], got["metrics"]["nDCG@10"]
    if not abs(ndcg - want["ndcg_10"]) <= tol["ndcg_10"]:
        problems.append(f"{system}: {dataset} nDCG@10 {ndcg:.3f}, expected {want['ndcg_10']:.3f} +- {tol['ndcg_10']}")
    if "nnz_per_doc" in want:
        nnz = got["efficiency"]["mean_nnz_per_doc"]
        if not abs(math.log(nnz / want["nnz_per_doc"])) <= math.log(tol["nnz_per_doc"]):
            problems.append(f"{system}: {dataset} {nnz:.0f} non-zeros per document, expected "
                            f"{want['nnz_per_doc']} within x/{tol['nnz_per_doc']}")
    return problems


def render(expected: Mapping[str, Any]) -> str:
    """The expected table in Markdown, one row per run and training precision, with its tolerance."""
    tol, dataset = expected["tolerance"], expected["dataset"]
    lines = [f"| run | precision | training | {dataset} nDCG@10 | non-zeros per document |", "|---|---|---|---|---|"]
    for run in run_names(expected):
        for precision in PRECISIONS:
            row = expected["runs"].get(precision, {}).get(run)
            if row is None:
                continue
            if row["status"] == "ok":
                lines.append(f"| {run} | {precision} | ok | {row['ndcg_10']:.3f} | {row['nnz_per_doc']:,} |")
            else:
                lines.append(f"| {run} | {precision} | **collapsed ({row.get('verdict', '')})** | collapsed | — |")
    for system, datasets in (expected.get(UNTRAINED) or {}).items():
        row = datasets.get(dataset)
        if row is not None:
            kind = "none (BM25)" if system == "bm25" else "published checkpoint"
            nnz = f"{row['nnz_per_doc']:,}" if "nnz_per_doc" in row else "—"
            lines.append(f"| {system} | — | {kind} | {row['ndcg_10']:.3f} | {nnz} |")
    untrained = expected.get(UNTRAINED) or {}
    others = list(dict.fromkeys(d for datasets in untrained.values() for d in datasets if d != dataset))
    if others:
        columns = [dataset, *others]
        lines += ["", f"| untrained system | {' | '.join(f'{d} nDCG@10' for d in columns)} |",
                  "|---|" + "---|" * len(columns)]
        for system, datasets in untrained.items():
            cells = [f"{datasets[d]['ndcg_10']:.3f}" if d in datasets else "—" for d in columns]
            lines.append(f"| {system} | {' | '.join(cells)} |")
    lines += ["", f"Tolerance: nDCG@10 ± {tol['ndcg_10']}, non-zeros within ×/÷ {tol['nnz_per_doc']}. A run is held to "
              "the figures of the precision it trained in", "(`precision: auto`: bf16 autocast on a CPU with AMX, "
              "fp32 on others)."]
    return "\n".join(lines)


def rewrite_block(text: str, name: str, table: str) -> str:
    """``text`` with the block between the ``name`` markers replaced by ``table``."""
    begin, end = BEGIN.format(name=name), END.format(name=name)
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ExpectedError(f"no block {begin} ... {end}")
    return pattern.sub(lambda _: f"{begin}\n{table}\n{end}", text)
