"""No import cycle between our modules, function-level imports included (issue #34: three loops hid
behind imports inside functions, which Python resolves late and import-linter's layers do not see
within one layer). grimp (the graph import-linter builds on) reads every import statement of a module,
at any depth; type-checking-only imports are left out: they never run."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

PACKAGES = ("launcher", "roles", "healthchecks")


def cycles(imports: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return sorted(found)


def import_graph(*packages: str) -> dict[str, set[str]]:
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=True, cache_dir=None)
    ours = set(graph.modules)
    return {m: set(graph.find_modules_directly_imported_by(m)) & ours for m in ours}


def test_no_module_of_ours_imports_itself_back() -> None:
    assert cycles(import_graph(*PACKAGES)) == []


def test_a_loop_behind_a_function_level_import_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A control: the loop recipe_file -> recipe_yaml -> recipe_file, as it was, the first import
    inside a function; and none once the second one goes."""
    package = tmp_path / "looped"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def read():\n    from looped.b import parse\n    return parse\n")
    (package / "b.py").write_text("from looped.a import read\n\ndef parse():\n    return read\n")
    (package / "c.py").write_text("from looped.a import read\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles(import_graph("looped")) == [["looped.a", "looped.b"]]
    (package / "b.py").write_text("def parse():\n    return 1\n")
    assert cycles(import_graph("looped")) == []
    sys.modules.pop("looped", None)
