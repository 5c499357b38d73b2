"""Engine facts live in roles/engines/ (and the pool classes of the recipe schema): a string literal
naming an engine, an env variable of an engine's prefix, a KV connector or a module a connector
imports anywhere else is a fact declared outside its family (docs/adding-an-engine.md). Docstrings
and comments may name them; code may not."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from launcher.config.recipe import VLLM_CONNECTORS
from roles.engines import ENGINE_ENV_PREFIXES, FAMILIES

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("launcher", "roles", "healthchecks")
# Read from the registered families: a new engine is checked from the day it is registered.
ENGINE_NAMES = re.compile("|".join(re.escape(family.name) for family in FAMILIES), re.IGNORECASE)
# The modules a family imports for a connector or a --load-format, and their packages.
_MODULES = {
    name
    for family in FAMILIES
    for pair in (*family.connector_modules.values(), *family.load_format_modules.values())
    for name in pair
}
_NAMED = "|".join(map(re.escape, [*VLLM_CONNECTORS, *_MODULES]))  # connectors, the modules they import
ENGINE_FACTS = re.compile(rf"\b(?:(?:{'|'.join(ENGINE_ENV_PREFIXES)})_[A-Z0-9_]+|{_NAMED})\b")
# launcher/catalogs/generate.py runs inside the engines' interpreters and reads their parsers.
HOME = ("roles/engines/", "launcher/config/recipe.py", "launcher/catalogs/generate.py")
# file -> the literals allowed there, each with why.
ALLOWED = {
    # A help text's example of an env mapping; any variable name would do, this one is familiar.
    "launcher/config/settings.py": {'give a JSON object of strings, e.g. {"VLLM_LOGGING_LEVEL": "DEBUG"}'},
    # `local-group --service`'s help and error: examples naming the built-in recipe's Service pools.
    "launcher/localgroup/__init__.py": {
        "also run one pod of another pool of the recipe behind a Service called NAME, started first "
        "(repeatable): e.g. --service mooncake-master=mooncake-master for a donor group",
        "e.g. --service mooncake-master=mooncake-master",
    },
}


def _docstrings(tree: ast.AST) -> set[int]:
    """Module, class and function docstrings, and bare string statements (attribute docs)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def engine_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and (ENGINE_NAMES.search(node.value) or ENGINE_FACTS.search(node.value))
    ]


def test_no_engine_name_outside_the_engine_families() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith(HOME):
                continue
            allowed = ALLOWED.get(name, set())
            found += [
                f"{name}:{line}: {text[:80]!r}" for line, text in engine_literals(path) if text not in allowed
            ]
    assert found == [], "engine facts outside roles/engines/:\n" + "\n".join(found)


def test_connector_names_only_in_the_connector_table() -> None:
    """Inside roles/engines/ too: code asks VLLM_CONNECTORS what a connector does, never its name."""
    table = "launcher/config/recipe.py"
    connectors = re.compile(rf"\b(?:{'|'.join(map(re.escape, VLLM_CONNECTORS))})\b")
    found = [
        f"{name}:{line}: {text[:80]!r}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (name := path.relative_to(ROOT).as_posix()) != table
        for line, text in engine_literals(path)
        if connectors.search(text)
    ]
    assert found == [], "connector names outside VLLM_CONNECTORS:\n" + "\n".join(found)


def test_the_scan_sees_code_and_skips_docstrings(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Talks to vLLM."""\n'
        "# sglang in a comment\n"
        "def f() -> str:\n"
        '    """SGLang too."""\n'
        '    return "VLLM_HOST_IP"\n'
        'TABLE = {"mooncake-master": 1}\n'
        'OK = "engine"\n'
        'IFNAME = "NCCL_SOCKET_IFNAME"\n'
        'CONNECTOR = "NixlConnector"\n'
        'MODULE = "nixl"\n'
        'NOT_A_PREFIX = "MCP_SERVER"\n'
    )
    assert sorted(engine_literals(sample)) == [
        (5, "VLLM_HOST_IP"),
        (6, "mooncake-master"),
        (8, "NCCL_SOCKET_IFNAME"),
        (9, "NixlConnector"),
        (10, "nixl"),
    ]


def test_every_allowance_is_still_needed() -> None:
    """An allow-list entry whose literal is gone would quietly allow it again later."""
    for name, allowed in ALLOWED.items():
        present = {text for _, text in engine_literals(ROOT / name)}
        assert allowed <= present, f"{name}: no longer holds {allowed - present}"
