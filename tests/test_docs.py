"""The documentation's shape: links that resolve, a short README, figures in one place.

* Links: every relative link in README.md, docs/*.md and config/README.md names a file or folder
  that exists (relative to the linking file), and its anchor, if any, names a heading of the
  target .md file under GitHub's slug rules (lowercase; spaces become hyphens; punctuation other
  than hyphens and underscores dropped; a repeated heading gets -1, -2, ...). http(s) and mailto
  links are not checked (no network). Headings and links inside fenced code blocks and inline
  code do not count.
* The README is a front door: at most 200 lines, none longer than 120 characters.
* Measured figures have one home, docs/measurements.md (benchmarks/ may keep its own benchmarks'
  figures). No other tracked text file may hold a dated timing: a line with a date (a year from
  2000 to 2099, a hyphen and two digits: the start of an ISO date) and, on the same line, a
  duration (a number followed by s, ms, min or h, with or without a space, or by GFLOPS).
  Allowed: docs/measurements.md and everything under benchmarks/; nothing else is excluded.
  Binary files (a NUL byte, or not UTF-8) are skipped.
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

DATE = re.compile(r"\b20\d\d-\d\d")
DURATION = re.compile(r"\d(?:\s?(?:s|ms|h)\b|\s?min|\s*GFLOPS)")
TRACKER = re.compile(r"\bissue\s*#\s*\d+|\bissue\s+\d+|\bthe\s+issue", re.I)
FIGURES_HOME = ("docs/measurements.md", "benchmarks/")


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


def test_no_dated_timings_outside_measurements():
    hits = [f"{name}:{i}: {line.strip()[:140]}"
            for name, text in tracked_text_files().items() if not name.startswith(FIGURES_HOME)
            for i, line in enumerate(text.splitlines(), 1) if DATE.search(line) and DURATION.search(line)]
    assert not hits, "dated timings belong in docs/measurements.md:\n" + "\n".join(hits)


def test_no_tracker_references():
    hits = [f"{name}:{i}: {line.strip()[:140]}"
            for name, text in tracked_text_files().items()
            for i, line in enumerate(text.splitlines(), 1) if TRACKER.search(line)]
    assert not hits, "state the requirement instead of pointing at the tracker:\n" + "\n".join(hits)
