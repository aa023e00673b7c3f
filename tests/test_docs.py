"""The documentation's shape: links that resolve, a short README, figures in one place.

* Links: every relative link in README.md, docs/*.md and config/README.md names a file or folder
  that exists (relative to the linking file), and its anchor, if any, names a heading of the
  target .md file under GitHub's slug rules (lowercase; spaces become hyphens; punctuation other
  than hyphens and underscores dropped; a repeated heading gets -1, -2, ...). http(s) and mailto
  links are not checked (no network). Headings and links inside fenced code blocks and inline
  code do not count.
* The README is a front door: at most 200 lines, none longer than 120 characters.
* Measured figures have one home, docs/measurements.md (benchmarks/ may keep its own benchmarks'
  figures; resources/ holds third-party data, whose README files are checked). Elsewhere a tracked
  text file may name a duration as a setting or a budget ("timeout: 600 s", "fits 30 minutes"),
  not as a measurement: a duration (a number or range with ms, s, min, h or their long forms)
  after a word of measuring or estimating ("~", "≈", about, roughly, took, takes, ran in, finished
  in, measured, elapsed, wall), a duration on a line with an ISO date, or a GFLOPS figure.
* No tracked text file points at tracker entries: the word "issue" followed by a number (with
  or without "#"), or the word "issue" directly after the word "the" (case-insensitive). The
  files state requirements themselves.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from support.markdown import headings_of, prose_lines, slug

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`+[^`]*`+")

TRACKER = re.compile(r"\bissue\s*#\s*\d+|\bissue\s+\d+|\bthe\s+issue", re.I)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_NUMBER = r"(?<![\w.,])\d+(?:[.,]\d+)*(?:\s?[-–]\s?\d+(?:[.,]\d+)*)?"
_UNIT = r"\s?(?:ms|s|secs?|seconds?|min|mins|minutes?|h|hrs?|hours?)\b(?!\s+of\b)"  # "100s of terms": a count
DURATION = re.compile(_NUMBER + _UNIT)
MEASURED = re.compile(r"(?:[~≈]\s*|\b(?:about|roughly|took|takes|ran\s+in|runs\s+in|finished\s+in|measured|"
                      rf"elapsed|wall:?)\s+){_NUMBER}{_UNIT}|{_NUMBER}\s*GFLOPS", re.I)
FIGURES_HOME = ("docs/measurements.md", "benchmarks/")
THIRD_PARTY_DATA = "resources/"

def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "config/README.md"]


def links_of(path: Path) -> list[str]:
    return [link for line in prose_lines(path.read_text(encoding="utf-8"))
            for link in LINK.findall(INLINE_CODE.sub("", line))]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_anchors_resolve(path: Path):
    broken = []
    for link in links_of(path):
        if re.match(r"(https?|mailto):", link):
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in headings_of(file)):
            broken.append(f"{link}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not broken, f"{path.relative_to(REPO)}: " + "; ".join(broken)


def test_slug_follows_github():
    assert slug("Data preparation and `IR_DATASETS_HOME`") == "data-preparation-and-ir_datasets_home"
    assert slug("Corpora, disk and query lengths") == "corpora-disk-and-query-lengths"
    assert slug("What `vocab_transfer` does (our reading)") == "what-vocab_transfer-does-our-reading"
    assert slug("Two explanations, two fixes, one DAG") == "two-explanations-two-fixes-one-dag"


def test_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines (at most 200)"
    long = [f"{i}: {len(line)} chars" for i, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, f"README.md lines over 120 characters: {long}"


def tracked_text_files() -> dict[str, str]:
    """{path: text} of every tracked file that is UTF-8 text without NUL bytes."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    out = {}
    for name in names.decode().split("\0"):
        path = REPO / name
        if not name or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            out[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return out


def measured_figure(line: str) -> bool:
    return bool(MEASURED.search(line) or DATE.search(line) and DURATION.search(line))


def checked_for_timings(name: str) -> bool:
    return not name.startswith(FIGURES_HOME) and (not name.startswith(THIRD_PARTY_DATA) or name.endswith(".md"))


# Each written with "_" before its unit so that this file holds no figure itself; the test drops it.
MEASURED_EXAMPLES = ("the demo took 741 _s on 2 cores", "bench_scale.py   # ~8 _min on 2 cores",
                     "1-thread fp32 matmul 87 _GFLOPS", "- wall: 568 _s", "finished in 6-8 _minutes",
                     "## 2026-12-02: the demo, 7 _min 16 _s")
SETTING_EXAMPLES = ("  timeout: 600 s", "samples the disk every 5 s", "is sized to fit 30 minutes on 2 cores",
                    "only large logits survive ReLU (~100s of terms)", "runtime: 1440   # 24 h",
                    "results/2026-12-02/ holds the run")


def test_the_timing_rule_tells_measured_figures_from_settings():
    missed = [e for e in MEASURED_EXAMPLES if not measured_figure(e.replace(" _", " "))]
    assert not missed, f"measured figures the rule lets through: {missed}"
    caught = [e for e in SETTING_EXAMPLES if measured_figure(e)]
    assert not caught, f"settings the rule takes for measured figures: {caught}"


def test_no_measured_timings_outside_measurements():
    hits = [f"{name}:{i}: {line.strip()[:140]}" for name, text in tracked_text_files().items()
            if checked_for_timings(name) for i, line in enumerate(text.splitlines(), 1) if measured_figure(line)]
    assert not hits, ("measured timings belong in docs/measurements.md (link to it from here), or say what the "
                      "thing does instead:\n" + "\n".join(hits))


def test_no_tracker_references():
    hits = [f"{name}:{i}: {line.strip()[:140]}"
            for name, text in tracked_text_files().items()
            for i, line in enumerate(text.splitlines(), 1) if TRACKER.search(line)]
    assert not hits, "state the requirement instead of pointing at the tracker:\n" + "\n".join(hits)
