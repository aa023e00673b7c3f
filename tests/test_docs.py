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
* The pages agree with what they describe: a default they state for a config key ("`key` (...
  default V") is the schema's; a value they state for the paper config ("`key`: V" on the paper's
  page) is config/config.yaml's; the SLURM profile leaves the direct indexer its one thread.
* User pages speak of the user's task: no project history, no account of how a test works, one
  link from the README to the contributor page that holds those; `splade-rescale --help` speaks of
  the commands.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

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


def _prose(path: Path) -> str:
    """The page's prose on one line (a sentence may wrap)."""
    return " ".join(path.read_text(encoding="utf-8").split())


def _schema_default(key: str):
    node = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    for part in key.split("."):
        node = node.get("properties", {}).get(part)
        if node is None:
            return None
    return node.get("default")


STATED_DEFAULT = re.compile(r"`([a-z_]+(?:\.[a-z_]+)+)`[^`]{0,80}?\bdefault:?\s+`?(\w[\w.,]*\w|\w)`?")
STATED_VALUE = re.compile(r"((?:`[a-z_]+(?:\.[a-z_]+)+`(?:,| and)?\s*)+):\s+`?(\d[\d.]*\d|\d)`?")
PAPER_SETS = re.compile(r"`([a-z_]+(?:\.[a-z_]+)+)`[^`]{0,120}?\bthe paper config sets `?(\d[\d.]*\d|\d)`?")
PAPER_PAGES = ("README.md", "docs/experiments-paper.md")
HISTORICAL = ("docs/measurements.md",)  # dated entries: a default then may differ from the default now


def test_stated_defaults_are_the_schemas():
    checked, wrong = 0, []
    for path in doc_files():
        if str(path.relative_to(REPO)) in HISTORICAL:
            continue
        for key, stated in STATED_DEFAULT.findall(_prose(path)):
            default = _schema_default(key)
            if default is None:  # not a config key (`slurm.conf`)
                continue
            checked += 1
            if stated.replace(",", "") != str(default):  # 3,000,000 states 3000000
                wrong.append(f"{path.relative_to(REPO)}: `{key}` default {stated}, the schema says {default}")
    assert checked >= 3 and not wrong, wrong or f"only {checked} stated defaults found"


def test_stated_paper_values_are_the_paper_configs():
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    stated = [(page, keys, value) for page in PAPER_PAGES for keys, value in STATED_VALUE.findall(_prose(REPO / page))]
    stated += [(str(path.relative_to(REPO)), f"`{key}`", value) for path in doc_files()
               if str(path.relative_to(REPO)) not in HISTORICAL for key, value in PAPER_SETS.findall(_prose(path))]
    checked, wrong = 0, []
    for page, keys, value in stated:
        for key in re.findall(r"`([^`]+)`", keys):
            actual = config
            for part in key.split("."):
                actual = actual.get(part) if isinstance(actual, dict) else None
            if actual is None:
                continue
            checked += 1
            if str(actual) != value:
                wrong.append(f"{page}: `{key}`: {value}, config/config.yaml says {actual}")
    assert checked >= 5 and not wrong, wrong or f"only {checked} stated values found"


def test_the_slurm_profile_leaves_the_direct_indexer_its_one_thread():
    """docs/slurm.md and docs/experiments-paper.md: one thread a direct impact index job, as the rule says."""
    profile = yaml.safe_load((REPO / "workflow/profiles/slurm/config.yaml").read_text())
    assert "impact_index" not in profile.get("set-threads", {}), "the profile's threads would replace the rule's"
    assert "one thread a job" in _prose(REPO / "docs/experiments-paper.md")


# What a user page does not say, and where it goes instead.
NOT_FOR_USERS = {
    r"\bonce did\b|\bours then\b|\bearlier all-|\bold layout\b|\bbefore .{0,30} joined\b":
        "project history: docs/contributing.md or nowhere",
    r"\breviewer": "a review's question: say the question itself",
    r"\.ci/run|test_slurm_cluster\.py": "how the project is tested: docs/contributing.md",
    r"\d+ lines because": "the size rule of modules: a comment in the module",
    r"set experiment: \w+": "a new experiment name reruns every job: keep the run's name",
}
CONTRIBUTOR_PAGES = ("docs/contributing.md", "docs/measurements.md")


def test_user_pages_speak_of_the_users_task():
    hits = [f"{path.relative_to(REPO)}: {pattern!r} ({why})" for path in doc_files()
            if str(path.relative_to(REPO)) not in CONTRIBUTOR_PAGES
            for pattern, why in NOT_FOR_USERS.items() if re.search(pattern, _prose(path), re.I)]
    assert not hits, "\n".join(hits)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert not re.findall(r"tests/test_\w+\.py", readme), "the README names no test module: docs/testing.md does"
    assert links_of(REPO / "README.md").count("docs/contributing.md") == 1, "one link to the contributor page"
    assert "docs/contributing.md" in readme


def test_the_command_line_help_speaks_of_the_commands():
    docstring = ast.get_docstring(ast.parse((REPO / "src/splade_rescale/cli.py").read_text())) or ""
    hits = [p for p, why in NOT_FOR_USERS.items() if re.search(p, docstring, re.I)]
    assert not hits, f"splade-rescale --help (cli.py's docstring) says {hits}"


def test_the_pages_that_name_an_experiment_say_to_keep_the_name():
    for page in ("config/README.md", "docs/datasets.md", "docs/experiments-paper.md"):
        text = _prose(REPO / page)
        keeps = re.search(r"\b[Kk]eep(?:ing)? (?:the |its )?(?:`experiment:` )?name", text)
        assert keeps and "every job again" in text, page


def test_the_demo_page_names_what_the_demo_writes():
    """Every table and figure a config without a factor sweep makes, and the report's command for the demo."""
    from splade_rescale.report.figures import FIGURE_NAMES
    from splade_rescale.report.tables import BASE_TABLES

    text = _prose(REPO / "docs/demo.md")
    missing = [name for name in (*BASE_TABLES, *FIGURE_NAMES) if f"`{name}`" not in text]
    assert not missing, f"docs/demo.md does not name these outputs of the demo: {missing}"
    assert "snakemake --report results/demo/report.html --configfile config/demo.yaml" in text


# --- One statement of each fact: the pages that stated it two ways now state it one way ---------------

USER_PAGES = [p for p in doc_files() if str(p.relative_to(REPO)) not in CONTRIBUTOR_PAGES + ("docs/testing.md",)]
MEMORY_RULE = "the run holds its jobs to the machine's memory"


def test_one_rule_for_the_runs_memory():
    """README and costs.md once said "--resources mem_mb=240000" (the machine's) and "the plan's peak": one rule,
    no machine's figure."""
    hits = [f"{p.relative_to(REPO)}: {m}" for p in USER_PAGES
            for m in re.findall(r"--resources mem_mb=\d+", p.read_text())]
    assert not hits, f"a machine's memory given as the advice: {hits}"
    for page in ("README.md", "docs/costs.md"):
        text = _prose(REPO / page).lower()
        assert MEMORY_RULE in text and "only to leave memory to others" in text, page


def test_one_statement_of_the_machine_make_plan_plans_for():
    """costs.md said "this machine's cores and 1 GPU", experiments-paper.md "the GPUs a run here would use"."""
    for page in ("docs/costs.md", "docs/experiments-paper.md"):
        text = _prose(REPO / page)
        assert "the GPUs a run here would use (1 on a machine that shows none)" in text, page
        assert "cores and 1 GPU" not in text, page


def test_the_demo_needs_no_gpu_on_every_page_that_says_what_it_needs():
    """README said `make demo` needs nothing else; install.md read as if a machine with a GPU stopped it."""
    assert "`make demo` needs no GPU, and a GPU does not stop it" in _prose(REPO / "docs/install.md")
    assert "nothing else, and no GPU" in _prose(REPO / "README.md")


def test_resources_readme_lists_every_demo_data_folder():
    """demo.md named the 719-passage collection the demo evaluates on; resources/demo/README.md did not list it."""
    readme = (REPO / "resources/demo/README.md").read_text()
    folders = [p.name for p in sorted((REPO / "resources/demo").iterdir()) if p.is_dir() and p.name != "models"]
    missing = [name for name in folders if f"| `{name}/` |" not in readme]
    assert folders and not missing, f"resources/demo/README.md does not list {missing}"


def test_every_install_on_a_user_page_brings_torch_first():
    """slurm.md and the README's cluster block said a bare `pip install -e .`; install.md: torch first."""
    bare = []
    for page in USER_PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
            code = re.sub(r"#.*", "", block)
            bare += [f"{page.relative_to(REPO)}: {m[0]}"
                     for m in re.finditer(r"pip install (?:-e|--editable) \S+", code)
                     if "torch==" not in code[:m.start()]]
    assert not bare, f"a project install without torch first: {bare}"


def test_the_paper_pages_read_the_wall_time_from_the_plan_not_a_dated_entry():
    """experiments-paper.md linked dated 8-GPU plans (walls of 13.5 h and 12.8 h) while the plan said another."""
    for path in USER_PAGES:
        text = path.read_text()
        dated_plans = re.findall(r"\(measurements\.md#[\w-]*plan[\w-]*\)", text)
        assert not dated_plans, f"{path.relative_to(REPO)} links dated plans: {dated_plans}; say `make plan ...`"
        if path.parent == REPO / "docs" or path.name == "README.md" and path.parent in (REPO, REPO / "config"):
            assert not re.search(r"\d[\d,.]* GPU-hours\b", _prose(path)), f"{path.relative_to(REPO)}: a plan's figure"
    assert "make plan PLAN_CORES=64 GPUS=8" in (REPO / "docs/experiments-paper.md").read_text()


def test_the_help_says_which_commands_come_after_only_where_some_do():
    """`splade-rescale --help` said "`plan` and the commands after it" of the last command: it names each tool."""
    from splade_rescale.cli import COMMANDS, build_parser

    description = " ".join(build_parser().description.split())
    names = list(COMMANDS)
    for name in re.findall(r"``([a-z-]+)`` and the commands after it", description):
        assert names.index(name) < len(names) - 1, f"--help: no command comes after {name}"
    tools = names[names.index("expected"):]  # the user tools, registered after the rules' stages
    assert all(f"``{name}``" in description for name in tools), f"--help names each of {tools}"


def test_user_pages_name_no_test_or_internal():
    """install.md (golden tables, math.fsum), demo.md (test paths, --render), calibration.md (how the parity
    test works), the README ("checked by the tests"), costs.md (module paths)."""
    internal = re.compile(r"\btests/\w+|test_\w+\.py|--render\b|math\.fsum|\bgolden\b|checked by the tests|"
                          r"splade_rescale\.\w+\.\w+")
    hits = [f"{p.relative_to(REPO)}: {m}" for p in USER_PAGES for m in internal.findall(_prose(p))]
    assert not hits, f"tests and internals on user pages (docs/contributing.md holds them): {hits}"


def test_the_plan_says_what_it_prices_and_names_no_module():
    from splade_rescale.costs.plan import ASSUMPTIONS, render_bill

    plan = {"totals": dict.fromkeys(("train_gpu_h", "encode_gpu_h", "index_core_h", "retrieve_core_h", "final_bytes",
                                     "peak_bytes"), 0.0),
            "reused": {}, "largest_corpus": "c", "models": [], "bm25": {"index_core_h": {}, "retrieve_core_h": {}},
            "corpora": {}, "queries": {}, "memory": {}}
    text = render_bill(plan, {}, "config/demo.yaml", "config/throughputs.json")
    assert "H200" in text and "do not model a CPU run" in text
    assert not re.search(r"splade_rescale\.\w+", text + " ".join(ASSUMPTIONS)), "the bill names a module"


# Words a user meets before a page defines them: each page that uses one defines it or links a page that does.
JARGON = {
    r"\bAMX\b": r"AMX \(Intel's matrix",
    r"\b2CR\b": r"two-click reproductions",
    r"\bnear-empty\b": r"near-empty\*? when|near-empty\*?: a handful|\| near-empty \|",
    r"`temp\(\)`": r"temporary",
    r"\bancient\b": r"modification time does not count",
    r"\brehearsal\b": r"(?!)",
    r"\bshared store\b": r"(?!)",
}


def test_jargon_is_defined_where_it_is_used():
    pages = {p: p.read_text() for p in USER_PAGES}
    undefined = []
    for path, text in pages.items():
        prose = _prose(path)
        linked = {(path.parent / link.partition("#")[0]).resolve() for link in links_of(path)
                  if link.endswith(".md") or ".md#" in link}
        for term, definition in JARGON.items():
            if re.search(term, prose) and not re.search(definition, prose) and not any(
                    re.search(definition, _prose(other)) for other in pages if other.resolve() in linked):
                undefined.append(f"{path.relative_to(REPO)}: {term}")
    assert not undefined, f"used but neither defined there nor on a page it links: {undefined}"


def test_the_files_user_pages_name_exist():
    """A script or file a user page names in code (`benchmarks/….py`, `config/….yaml`) is in the checkout: the
    speed scripts the preflight replaced are named nowhere."""
    named = re.compile(r"`((?:benchmarks|config|workflow|resources|envs)/[\w./-]+\.(?:py|yaml|json|md|txt))`")
    missing = [f"{p.relative_to(REPO)}: {name}" for p in USER_PAGES for name in named.findall(p.read_text())
               if "{" not in name and not (REPO / name).exists()]
    assert not missing, f"files user pages name that do not exist: {missing}"


def test_the_readme_demo_figures_are_the_plans():
    """The laptop block's memory and disk are the demo plan's (its time is not: the plan prices GPUs)."""
    from splade_rescale.config import load_config
    from splade_rescale.costs.plan import build_plan, load_throughputs
    from splade_rescale.retrieval.lucene import MEM_MB

    readme = _prose(REPO / "README.md")
    block = readme[readme.index("## Running the demo on a laptop"):readme.index("## Running the paper's")]
    declared = re.search(r"each index or search job declares (\d+) GB", block)
    assert declared and int(declared[1]) * 1000 == max(MEM_MB["impact_retrieve"], MEM_MB["bm25_index"]), block
    disk = re.search(r"`results/demo/` ends at about ([\d.]+) GB", block)
    plan = build_plan(load_config(REPO / "config/demo.yaml"), load_throughputs(), REPO)
    assert disk and abs(float(disk[1]) - plan["totals"]["final_bytes"] / 1e9) < 0.5, (disk, plan["totals"])
    assert "does not model a CPU run" in block


# --- The pages a new user looked for --------------------------------------------------------------------

def _section(page: str, heading: str) -> str:
    text = (REPO / page).read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return " ".join(text[start:end if end > 0 else None].split())


def test_a_page_says_how_to_watch_a_run_and_what_may_be_deleted():
    page = _prose(REPO / "docs/running.md")
    for needed in ("steps (", ".snakemake/log/", "logs/train/", "shard NAME finished", "devices:", "nvidia-smi",
                   "checkpoints/", "make clean-checkpoints", "$IR_DATASETS_HOME", "HF_HOME", "triples archive"):
        assert needed in page, f"docs/running.md does not say {needed!r}"
    assert "docs/running.md" in (REPO / "README.md").read_text()


def test_the_container_section_gives_a_whole_docker_run():
    section = _section("docs/experiments-paper.md", "## In a container")
    run = re.search(r"docker run [^`]*", section)
    assert run, "no docker run"
    for needed in ("--gpus", "--shm-size", "--memory", "-v ", "HF_HOME", "IR_DATASETS_HOME", "python:3.11",
                   "make install TORCH=cuda", "snakemake --cores"):
        assert needed in run[0], f"the docker run lacks {needed!r}"
    assert re.search(r"driver \d+ or later", section), "the NVIDIA driver the CUDA build needs"


def test_the_slurm_page_says_how_to_install_and_fetch_for_offline_nodes():
    page = _prose(REPO / "docs/slurm.md")
    for needed in ("Python 3.11", "same path", "make install TORCH=cuda", "44 GB", "login node", "HF_HUB_OFFLINE",
                   "--conda-create-envs-only"):
        assert needed in page, f"docs/slurm.md does not say {needed!r}"


def test_the_datasets_page_says_which_published_figures_compare():
    section = _section("docs/datasets.md", "## Published figures to compare with")
    assert "bm25:" in section and "published_models:" in section
    assert "mean of the twelve" in section and "cqadupstack" in section.lower()
