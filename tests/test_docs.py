"""The documentation's shape: links that resolve, a short README, figures in one place.

* Links: every relative link in README.md, docs/*.md and config/README.md names a file or folder
  that exists (relative to the linking file), and its anchor, if any, names a heading of the
  target .md file under GitHub's slug rules (lowercase; spaces become hyphens; punctuation other
  than hyphens and underscores dropped; a repeated heading gets -1, -2, ...). http(s) and mailto
  links are not checked (no network). Headings and links inside fenced code blocks and inline
  code do not count.
* The README is a front door: at most 200 lines, none longer than 120 characters.
* Measured figures have one home, docs/measurements.md (benchmarks/ may keep its own benchmarks'
  figures). Everywhere else a tracked text file may name a duration as a setting, a budget or a
  rule ("timeout: 600", "every 5 s", "sized to fit 30 minutes on 2 cores"), never as a measurement.
  A duration is a number (or a range such as 3-5) followed by ms, s, sec, seconds, min, minutes,
  h or hours; a rate is a number followed by GFLOPS. A line holds a measured figure when
  - it has a date (a year from 2000 to 2099, a hyphen and two digits: the start of an ISO date)
    and a duration or a rate (a dated timing);
  - or a duration follows a word of measuring or estimating: "~", "≈", about, roughly, around,
    approximately, nearly, almost ("~N min"); took, takes, taking, lasted, spent, costs, ran in,
    runs in, finished in, measured, elapsed, wall ("took N s", "cost N-M s");
  - or a duration stands alone in parentheses ("(N s)") or after a colon ("passive: N s");
  - or a duration is followed by where it ran ("N-M minutes alone on 2 cores", "on one GPU") or
    by a comparison (slower, faster, late, longer, shorter) or by wall or elapsed;
  - or it has a rate ("N GFLOPS");
  - or it is a row of a Markdown table whose header names a timing column (time, wall, elapsed,
    duration, seconds, minutes, hours, or a unit in parentheses such as "(s)") and that row has a
    number in that column.
  A budget word right before a duration makes it a setting, not a figure: fit, fits, within,
  sized for, budget, limit, timeout, every, at most, up to; so does a setting's key before the
  colon ("timeout: 600 s", "{runtime: 30 min}": a name with _ or -, or timeout, limit, runtime,
  interval, delay, wait, period, time, deadline, budget). A wrapped sentence is read across one
  line break (the next line's comment or quote markers dropped), so "took" at the end of one line
  and "N s" at the start of the next are one figure (the line holding the number is the one
  reported). A number directly followed by "0s of"
  ("100s of terms") is a count, not a duration. Allowed: docs/measurements.md, everything under
  benchmarks/, and the third-party data under resources/ (its README files are checked). Binary
  files (a NUL byte, or not UTF-8) are skipped.
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
TRACKER = re.compile(r"\bissue\s*#\s*\d+|\bissue\s+\d+|\bthe\s+issue", re.I)
_ONE = r"\d+(?:,\d{3})*(?:\.\d+)?"  # 30, 0.1, 1,062
_NUMBER = rf"(?<![\w.,]){_ONE}(?:\s?[-–]\s?{_ONE})?"
_UNIT = r"(?:ms|s|secs?|seconds?|min|mins|minutes?|h|hrs?|hours?)\b"
DURATION_RE = rf"{_NUMBER}\s?{_UNIT}"
DURATION = re.compile(DURATION_RE)
RATE = re.compile(rf"{_NUMBER}\s*GFLOPS")
_APPROX = r"(?:[~≈]\s*|\b(?:about|roughly|around|approximately|nearly|almost)\s+)"
_VERB = (r"\b(?:took|takes?|taking|lasted|lasts?|spent|spends?|costs?|ran\s+in|runs?\s+in|finished\s+in|"
         r"finishes\s+in|measured(?:\s+at)?|elapsed|wall(?:\s+time)?)\s*[:=]?\s*")
_WHERE = (r"\s+(?:alone\s+|each\s+|in\s+all\s+)?on\s+(?:\d+|one|two|the)\s+(?:idle\s+|CPU\s+|project's\s+)?"
          r"(?:cores?|CPUs?|GPUs?|threads?|machine)\b")
_COMPARED = r"\s+(?:slower|faster|late|longer|shorter|wall|elapsed)\b"
MEASURED = re.compile(
    rf"{_APPROX}(?P<a>{DURATION_RE})"
    rf"|{_VERB}{_APPROX}?(?P<b>{DURATION_RE})"
    rf"|\(\s*{_APPROX}?(?P<c>{DURATION_RE})\s*\)"
    rf"|:\s*{_APPROX}?(?P<d>{DURATION_RE})"
    rf"|(?P<e>{DURATION_RE})(?:{_WHERE}|{_COMPARED})",
    re.I)
BUDGET = re.compile(r"\b(?:fits?|fitting|within|sized\s+for|budget(?:\s+of)?|limit(?:\s+of)?|timeout(?:\s+of)?|"
                    r"every|at\s+most|up\s+to)\s*$", re.I)
COUNT = re.compile(r"\d*0s\s+of\b")  # "100s of terms": hundreds, not seconds
# "timeout: 600 s", "{runtime: 30 min}": a setting's key before the colon (a name with _ or -, or a word for a setting)
SETTING_KEY = re.compile(r"(?:^|[{,(])\s*[\"']?\s*(?:[\w.]*[_-][\w.-]*|timeout|limit|runtime|interval|"
                         r"delay|wait|period|time|deadline|budget)[\"']?\s*$", re.I)
TIMING_HEADER = re.compile(r"\b(?:time|wall|elapsed|duration|seconds|minutes|hours)\b|\((?:ms|s|min|h)\)", re.I)
WRAP_MARKERS = " \t#*/>"
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


def table_timing_hits(lines: list[str]) -> set[int]:
    """0-based indexes of Markdown table rows with a number under a header cell that names a timing."""
    hits: set[int] = set()
    timing_columns: list[int] = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            timing_columns = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if i == 0 or not lines[i - 1].lstrip().startswith("|"):  # a table's first row: its header
            timing_columns = [j for j, c in enumerate(cells) if TIMING_HEADER.search(c)]
        elif not re.fullmatch(r"[\s|:-]*", line) and any(
                j < len(cells) and re.search(r"\d", cells[j]) for j in timing_columns):
            hits.add(i)
    return hits


def measured_figure(line: str, before: str = "", after: str = "") -> str | None:
    """The measured timing on ``line``, read with the end of the line ``before`` it and the start of
    the line ``after`` it (a wrapped sentence), or None."""
    if DATE.search(line) and (DURATION.search(line) or RATE.search(line)):
        return DATE.search(line).group(0) + " … " + (DURATION.search(line) or RATE.search(line)).group(0)
    if RATE.search(line):
        return RATE.search(line).group(0)
    head = before.rstrip() + " " if before.strip() else ""
    here = line.lstrip(WRAP_MARKERS)
    text = head + here + " " + after.lstrip(WRAP_MARKERS)
    for match in MEASURED.finditer(text):
        duration = next(name for name in "abcde" if match.group(name))
        start = match.start(duration)
        if not len(head) <= start < len(head) + len(here):  # the figure itself is on a neighbouring line
            continue
        if BUDGET.search(text[:start]) or COUNT.match(text, start):
            continue
        if duration == "d" and SETTING_KEY.search(text[len(head):match.start()]):
            continue
        return match.group(0).strip()
    return None


def timing_hits(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each line of ``text`` that holds a measured timing."""
    lines = text.splitlines()
    tables = table_timing_hits(lines)
    return [(i + 1, line) for i, line in enumerate(lines)
            if i in tables or measured_figure(line, lines[i - 1] if i else "",
                                              lines[i + 1] if i + 1 < len(lines) else "")]


def checked_for_timings(name: str) -> bool:
    return not name.startswith(FIGURES_HOME) and (not name.startswith(THIRD_PARTY_DATA) or name.endswith(".md"))


# Each written with "_" before its unit so that this file holds no figure itself; the test drops it.
MEASURED_EXAMPLES = (
    "the demo took 741 _s on the project's machine",
    "# the demo's first evaluation took\n# 43 _s in a fresh environment",
    "bench_encode.py   # 25k to 200k documents; ~8 _min on 2 cores",
    "the four trainings (91 _s) ran side by side",
    "two trainings side by side: 76 _s with spinning, 45 _s passive",
    "collecting the whole suite again cost 8-12 _s of",
    "End to end (6-8 _minutes alone on 2\n    cores, 8-10 beside the other tests)",
    "1-thread fp32 matmul 87 _GFLOPS before the run",
    "the parallel phase finished in 17 _min",
    "- wall: 568 _s",
    "| phase | tests | time |\n|---|---|---|\n| serial | 1 passed | 2 _min 5 _s |",
)
SETTING_EXAMPLES = (
    "  timeout: 600",
    "  time_limit: 3600   # s",
    "    runtime: 1440         # 24 h (splade-pp: 150k steps)",
    "samples the disk of the experiment's folder every 5 s",
    "is sized to fit 30 minutes on 2 cores",
    "That shape does not fit 30 minutes on 2 cores; its measured times are in measurements.md",
    "SIGKILL if it does not exit in 15 s",
    "MinJobAge 3600 s keeps finished jobs visible",
    "only large logits survive ReLU (~100s of terms)",
    "first status check 10 s after a submission (default 40)",
    "  timeout: 600 s",
    "resources: {mem_mb: 4000, runtime: 30 min}",
    "slurm-init-seconds-before-status-checks: 10 s",
    "| setting | default |\n|---|---|\n| `timeout` | 600 |",
)


def test_the_timing_rule_tells_measured_figures_from_settings():
    missed = [e for e in MEASURED_EXAMPLES if not timing_hits(e.replace(" _", " "))]
    assert not missed, f"measured figures the rule lets through: {missed}"
    caught = [e for e in SETTING_EXAMPLES if timing_hits(e)]
    assert not caught, f"settings the rule takes for measured figures: {caught}"


def test_no_measured_timings_outside_measurements():
    hits = [f"{name}:{i}: {line.strip()[:140]}" for name, text in tracked_text_files().items()
            if checked_for_timings(name) for i, line in timing_hits(text)]
    assert not hits, ("measured timings belong in docs/measurements.md (link to it from here), or say what the "
                      "thing does instead:\n" + "\n".join(hits))


def test_no_tracker_references():
    hits = [f"{name}:{i}: {line.strip()[:140]}"
            for name, text in tracked_text_files().items()
            for i, line in enumerate(text.splitlines(), 1) if TRACKER.search(line)]
    assert not hits, "state the requirement instead of pointing at the tracker:\n" + "\n".join(hits)
