"""No import cycle in the package, deferred and ``TYPE_CHECKING`` imports included.

import-linter's layers hold the direction between layers; inside one layer
two modules could still import each other, through an import in a function
or under ``TYPE_CHECKING`` that Python never runs at import time.  Such a
pair is one job split in two (issue 24): this test reads every module's
imports with :mod:`ast`, wherever they are, and finds the strongly connected
components of the graph they draw.
"""

from __future__ import annotations

import ast
from pathlib import Path

import oma_bridge

PACKAGE = Path(oma_bridge.__file__).resolve().parent


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of ``package``: its dotted name -> (file, whether it is a package)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        modules[".".join(parts)] = (path, is_package)
    return modules


def _owner(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The module ``name`` is or lives in (``a.b.C`` -> ``a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports anywhere in its text."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    base = here
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    source = f"{base}.{source}" if source else base
                # ``from a import b``: the module a.b when there is one, else a.
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                ours = target == package.name or target.startswith(package.name + ".")
                owner = _owner(target, modules) if ours else None
                if owner is not None and owner != name:
                    graph[name].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    shown = "\n".join(" <-> ".join(component) for component in found)
    assert not found, f"modules that import each other (move what they share down):\n{shown}"


def test_the_finder_sees_deferred_and_type_checking_imports(tmp_path: Path) -> None:
    """The finder itself: a function's import and a TYPE_CHECKING one close a cycle."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from .c import thing\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n"
    )
    (package / "d.py").write_text("import pkg.a\nimport json\n")
    graph = import_graph(package)
    assert graph["pkg.d"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
