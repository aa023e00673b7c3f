"""Expected scores as data, as Pyserini's reproduction (2CR) files keep theirs.

One YAML file per experiment (``config/expected/demo.yaml``) names, for every trained run, its
training status and, for a working model, one dataset's nDCG@10 and mean non-zeros per document,
with the tolerance a rerun on another machine must meet. :func:`check` compares a finished
results folder with it; :func:`render` is the Markdown table the README and docs show, and
:func:`rewrite_block` keeps their copies equal to the file.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

BEGIN, END = "<!-- expected-scores:begin {name} -->", "<!-- expected-scores:end {name} -->"


class ExpectedError(ValueError):
    """An expected-scores file that cannot be used; one line naming the file and key."""


def load_expected(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    data = yaml.safe_load(path.read_text()) or {}
    for key in ("dataset", "tolerance", "runs"):
        if key not in data:
            raise ExpectedError(f"{path}: missing key {key!r}")
    for run, row in data["runs"].items():
        if row.get("status") not in ("ok", "collapsed"):
            raise ExpectedError(f"{path}: runs.{run}.status must be ok or collapsed, not {row.get('status')!r}")
        if row["status"] == "ok" and not {"ndcg_10", "nnz_per_doc"} <= set(row):
            raise ExpectedError(f"{path}: runs.{run} is ok but lacks ndcg_10 or nnz_per_doc")
    return data


def measured(results: str | Path, run: str, dataset: str) -> dict[str, Any]:
    """Status, verdict, nDCG@10 and non-zeros per document of ``run`` ("backbone/variant") from its
    backbone's summary (results/{experiment}/summary/{backbone}.json)."""
    backbone, variant = run.split("/", 1)
    summary = json.loads((Path(results) / "summary" / f"{backbone}.json").read_text())
    entry = summary["variants"][variant]
    out = {"status": entry["training"]["status"], "verdict": entry["training"].get("verdict")}
    if out["status"] == "ok":
        scores = entry["datasets"][dataset]
        out["ndcg_10"] = scores["metrics"]["nDCG@10"]
        out["nnz_per_doc"] = scores["efficiency"]["mean_nnz_per_doc"]
    return out


def check(expected: Mapping[str, Any], results: str | Path) -> list[str]:
    """One line per run outside the expected figures (empty: every run as expected)."""
    tol, dataset, problems = expected["tolerance"], expected["dataset"], []
    for run, want in expected["runs"].items():
        got = measured(results, run, dataset)
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
    return problems


def render(expected: Mapping[str, Any]) -> str:
    """The expected table in Markdown, with its tolerance."""
    tol, dataset = expected["tolerance"], expected["dataset"]
    lines = [f"| run | training | {dataset} nDCG@10 | non-zeros per document |", "|---|---|---|---|"]
    for run, row in expected["runs"].items():
        if row["status"] == "ok":
            lines.append(f"| {run} | ok | {row['ndcg_10']:.3f} | {row['nnz_per_doc']:,} |")
        else:
            lines.append(f"| {run} | **collapsed ({row.get('verdict', '')})** | collapsed | — |")
    lines += ["", f"Tolerance: nDCG@10 ± {tol['ndcg_10']}, non-zeros within ×/÷ {tol['nnz_per_doc']}."]
    return "\n".join(lines)


def rewrite_block(text: str, name: str, table: str) -> str:
    """``text`` with the block between the ``name`` markers replaced by ``table``."""
    begin, end = BEGIN.format(name=name), END.format(name=name)
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ExpectedError(f"no block {begin} ... {end}")
    return pattern.sub(lambda _: f"{begin}\n{table}\n{end}", text)
