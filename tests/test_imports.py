"""The package's imports form layers: no module, and no subpackage, reaches itself through imports,
counting every ``import`` and ``from ... import`` (top level, inside functions, under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast

from conftest import REPO

PACKAGE = REPO / "src" / "splade_rescale"


def dotted(path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path, name: str, known: set[str]) -> set[str]:
    """The package's modules one file imports: ``from pkg import mod`` counts as pkg.mod where that is a module."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            found |= {f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names}
    return found & known - {name}


def import_graph() -> dict[str, set[str]]:
    paths = {dotted(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported(path, name, set(paths)) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while v not in component:
                component.add(stack.pop())
            on_stack.difference_update(component)
            if len(component) > 1:
                found.append(path_around(graph, component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def path_around(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest import path from the component's first module back to itself, within the component."""
    start = min(component)
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for w in sorted(graph[path[-1]] & component):
            if w == start:
                return path + [start]
            if w not in seen:
                seen.add(w)
                paths.append(path + [w])
    raise AssertionError(component)


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (move the shared concept to a module both can import):\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_the_subpackages_form_layers():
    """splade_rescale.model must not import splade_rescale.retrieval while retrieval imports model."""
    top = lambda name: ".".join(name.split(".")[:2])  # noqa: E731
    graph: dict[str, set[str]] = {}
    for name, targets in import_graph().items():
        graph.setdefault(top(name), set()).update(top(t) for t in targets if top(t) != top(name))
    found = cycles(graph)
    assert not found, "subpackage cycles (move the shared concept down a layer):\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_the_check_counts_function_level_type_checking_and_relative_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from splade_rescale import config\n"
                      "def f():\n    import splade_rescale.atomic\n    from .recipes import load_recipes\n")
    known = {"splade_rescale.config", "splade_rescale.atomic", "splade_rescale.training.recipes", "splade_rescale"}
    assert imported(module, "splade_rescale.training.m", known) == known - {"splade_rescale"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
