"""The tables of the hand-made one-seed results tree (support/results.py, plus a ``k4`` variant so
that the factor sweep is made) rendered byte for byte as in tables_one_seed/: with one seed per
variant the seed layer is invisible, and a layout change shows as a reviewed diff.

Regenerate after a deliberate change: ``python tests/report/test_tables_golden.py --write-golden``; it
prints the diff of every table it rewrites, for the review."""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "tables_one_seed"
sys.path.insert(0, str(GOLDEN.parents[1]))  # tests/, for support/ when run as a script

from support.results import CONFIG, write_results  # noqa: E402


def rendered_tables(results: dict) -> dict[str, str]:
    """Every table of CONFIG + k4 in every format, with the footer ``FOOTER``, by file name."""
    from splade_rescale.report.rendering import FORMATS, RENDERERS
    from splade_rescale.report.tables import build_tables

    config = json.loads(json.dumps(CONFIG))
    config["variants"]["k4"] = {"policy": "constant", "factor": "1/4"}
    return {f"{t.name}.{ext}": RENDERERS[ext](t, "FOOTER")
            for t in build_tables(config, results["summaries"], results["bm25"], results["norms_csv"])
            for ext in FORMATS}


def test_one_seed_tables_are_byte_identical_to_the_golden_tables(fixture_results) -> None:
    rendered = rendered_tables(fixture_results)
    golden = {p.name: p.read_text(encoding="utf-8") for p in GOLDEN.iterdir() if p.name != "README.md"}
    assert rendered.keys() == golden.keys()
    for name, text in rendered.items():
        assert text == golden[name], name


if __name__ == "__main__" and sys.argv[1:] == ["--write-golden"]:
    for name, text in rendered_tables(write_results(Path(tempfile.mkdtemp()))).items():
        path = GOLDEN / name
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(keepends=True), text.splitlines(keepends=True),
                                                   f"golden/{name}", f"rendered/{name}"))
        path.write_text(text, encoding="utf-8")
