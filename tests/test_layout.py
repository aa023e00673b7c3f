"""The package's folders show its architecture and the tests follow them: every subpackage has its
test folder, a module over 400 lines says why in its docstring or, where the docstring is a
command's help, in a comment at its top, and test modules share helpers
through tests/support/ rather than importing one another (docs/testing.md, Layout)."""

from __future__ import annotations

import ast
import re

from conftest import REPO

PACKAGE = REPO / "src" / "splade_rescale"
TESTS = REPO / "tests"
# Test folders that mirror no subpackage: the workflow, the benchmark scripts, helpers.
OWN_FOLDERS = {"workflow", "benchmarks", "support"}
SIZE_LIMIT = 400
SIZE_REASON = re.compile(r"\b\d{3} lines\b")


def subpackages() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_every_subpackage_has_its_test_folder_and_no_folder_is_stray():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    missing = [name for name in sorted(subpackages()) if not any((TESTS / name).glob("test_*.py"))]
    assert not missing, f"subpackages without tests/<name>/test_*.py: {missing}"
    stray = folders - subpackages() - OWN_FOLDERS
    assert not stray, f"test folders that mirror no subpackage: {sorted(stray)}; name them after one, or say why here"


def test_a_module_over_the_size_limit_says_why_at_its_top():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        lines = len(text.splitlines())
        head = (ast.get_docstring(ast.parse(text)) or "") + "".join(  # the docstring and the comments at the top
            line for line in text.splitlines()[:40] if line.startswith("#"))
        if lines > SIZE_LIMIT and not SIZE_REASON.search(head):
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
