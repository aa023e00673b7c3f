"""The package's folders show its architecture and the tests follow them: every subpackage has its
test folder, every module has a test file that covers it (the one that mirrors it, or the one
COVERED_BY names), a module over 400 lines says why in its docstring, and test modules share helpers
through tests/support/ rather than importing one another (docs/testing.md, Layout).

Which test file covers a module: the file that mirrors it, tests/<subpackage>/test_<module>.py
(tests/test_<module>.py for a top-level module, tests/data/fixtures/test_<module>.py for
data/fixtures/), where that file exists; otherwise the files COVERED_BY names, most tests there being
named for a behaviour rather than a module. Checked: every module has one or the other; COVERED_BY
names only modules that exist and that no file mirrors, and only test files that exist; and each
covering file reaches its module through imports: the modules it imports or names
(``splade_rescale.x.y``), with those of the tests/support/ helpers it imports, and everything those
import in turn inside the package (function-level imports included); a test that runs the workflow or
the command line (it mentions snakemake or splade-rescale, or imports support.workflow) also reaches
what the Snakefile and workflow/rules/ import and splade_rescale.cli. Reaching a module does not prove
a test checks it; the table says which tests do, and the check keeps the table from naming a file
that cannot.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "src" / "splade_rescale"
TESTS = REPO / "tests"
# Test folders that mirror no subpackage: the workflow, the benchmark scripts, the serial phase, helpers.
OWN_FOLDERS = {"workflow", "benchmarks", "serial", "support"}
SIZE_LIMIT = 400
SIZE_REASON = re.compile(r"\b\d{3} lines\b")
WORKFLOW_USE = re.compile(r"\bsnakemake\b|splade-rescale|\bsupport\.workflow\b|from support import workflow")
MENTION = re.compile(r"\bsplade_rescale(?:\.\w+)+")

# Modules that no test file mirrors: the test files that cover them (paths under tests/).
COVERED_BY: dict[str, tuple[str, ...]] = {
    "atomic.py": ("retrieval/test_encode.py",),
    "backbones/from_config.py": ("backbones/test_config_backbones.py",),
    "backbones/published.py": ("backbones/test_published_models.py",),
    "backbones/sources.py": ("backbones/test_backbones_norms.py", "backbones/test_config_backbones.py"),
    "backbones/tokenizers.py": ("model/test_vocab_transfer.py",),
    "cli.py": ("workflow/test_workflow.py", "test_reliability.py"),
    "costs/fit_throughputs.py": ("serial/test_rehearsal_plan.py",),
    "costs/inputs.py": ("costs/test_plan.py",),
    "costs/model_shapes.py": ("costs/test_schedule.py",),
    "costs/plan_report.py": ("costs/test_plan.py",),
    "data/collection_sizes.py": ("costs/test_sizes.py",),
    "data/corpora.py": ("workflow/test_workflow.py",),
    "data/fixtures/demo.py": ("data/test_datasets.py",),
    "data/fixtures/rehearsal.py": ("costs/test_rehearsal.py",),
    "data/prepare.py": ("retrieval/test_size_guard.py", "workflow/test_prepare_workflow.py"),
    "digests.py": ("training/test_train_resume.py",),
    "evaluation/ranx_inputs.py": ("evaluation/test_evaluate.py",),
    "model/norms.py": ("backbones/test_backbones_norms.py",),
    "model/rescale.py": ("backbones/test_backbones_norms.py", "model/test_logit_shift.py"),
    "model/splade.py": ("model/test_sparse_encoder_compat.py",),
    "report/provenance.py": ("report/test_tables.py",),
    "report/rendering.py": ("report/test_tables_golden.py",),
    "report/results.py": ("report/test_tables.py", "backbones/test_published_models.py"),
    "report/seed_spread.py": ("training/test_seeds.py",),
    "report/significance.py": ("report/test_tables.py",),
    "report/summary.py": ("report/test_tables.py",),
    "retrieval/shard_folder.py": ("retrieval/test_encode_resume.py", "retrieval/test_encode_pipeline.py",
                                  "retrieval/test_encode.py"),
    "retrieval/skips.py": ("retrieval/test_size_guard.py",),
    "retrieval/sparse_rows.py": ("retrieval/test_encode.py",),
    "training/data.py": ("training/test_prepare.py",),
    "training/recipes.py": ("training/test_train.py",),
}


def subpackages() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_every_subpackage_has_its_test_folder_and_no_folder_is_stray():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    missing = [name for name in sorted(subpackages()) if not any((TESTS / name).glob("test_*.py"))]
    assert not missing, f"subpackages without tests/<name>/test_*.py: {missing}"
    stray = folders - subpackages() - OWN_FOLDERS
    assert not stray, f"test folders that mirror no subpackage: {sorted(stray)}; name them after one, or say why here"


def test_a_module_over_the_size_limit_says_why_in_its_docstring():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > SIZE_LIMIT and not SIZE_REASON.search(docstring):
            unexplained.append(f"{path.relative_to(REPO)} ({lines} lines)")
    assert not unexplained, f"over {SIZE_LIMIT} lines without a stated reason ('Over 400 lines because ...'): " \
                            f"{unexplained}"


def test_test_modules_share_helpers_through_support_not_each_other():
    importing = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            importing += [f"{path.relative_to(REPO)} imports {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not importing, f"move the shared helper to tests/support/: {importing}"


def modules() -> list[str]:
    """The package's modules (no __init__.py), as paths under src/splade_rescale/."""
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def mirror(module: str) -> Path:
    path = Path(module)
    return TESTS / path.parent / f"test_{path.stem}.py"


def dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.AST, known: set[str]) -> set[str]:
    """The package's modules an AST imports anywhere (function-level imports included)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found & known


def package_graph() -> dict[str, set[str]]:
    paths = {dotted(p): p for p in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {name: imports_of(ast.parse(path.read_text()), known) for name, path in paths.items()}


def mentioned(text: str, known: set[str]) -> set[str]:
    """``splade_rescale.x.y`` named in a text (a ``python -m``, a patched name), trimmed to a module."""
    found = set()
    for name in MENTION.findall(text):
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        found.add(name)
    return found & known


def workflow_roots(known: set[str]) -> set[str]:
    texts = [(REPO / "Snakefile").read_text(), *(p.read_text() for p in (REPO / "workflow/rules").glob("*.smk"))]
    return {"splade_rescale.cli"} | set().union(*(mentioned(t, known) for t in texts))


def reached_by(test_file: Path, graph: dict[str, set[str]]) -> set[str]:
    """The package's modules a test file reaches (see the module docstring)."""
    known = set(graph)
    roots, seen_files, files = set(), set(), [test_file]
    while files:
        path = files.pop()
        if path in seen_files or not path.exists():
            continue
        seen_files.add(path)
        text = path.read_text()
        tree = ast.parse(text)
        roots |= imports_of(tree, known) | mentioned(text, known)
        if WORKFLOW_USE.search(text):
            roots |= workflow_roots(known)
        helpers = imports_of(tree, {f"support.{p.stem}" for p in (TESTS / "support").glob("*.py")})
        files += [TESTS / "support" / f"{name.split('.')[1]}.py" for name in helpers]
    reached, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += graph.get(name, ())
    return reached


def test_every_module_has_a_test_file_that_covers_it():
    graph = package_graph()
    problems = []
    for module in modules():
        named = COVERED_BY.get(module)
        if mirror(module).exists():
            if named:
                problems.append(f"{module}: {mirror(module).relative_to(REPO)} mirrors it; drop its COVERED_BY entry")
            files = [mirror(module)]
        elif not named:
            problems.append(f"{module}: no {mirror(module).relative_to(REPO)}; add one, or a COVERED_BY entry")
            continue
        else:
            files = [TESTS / name for name in named]
        name = dotted(PACKAGE / module)
        for path in files:
            if not path.is_file() or not path.name.startswith("test_"):
                problems.append(f"{module}: COVERED_BY names {path.relative_to(REPO)}, not a test file")
            elif name not in reached_by(path, graph):
                problems.append(f"{module}: {path.relative_to(REPO)} neither imports it nor reaches it")
    stray = sorted(set(COVERED_BY) - set(modules()))
    assert not stray, f"COVERED_BY names modules that do not exist: {stray}"
    assert not problems, "tests/test_layout.py COVERED_BY, or the tests:\n" + "\n".join(problems)
