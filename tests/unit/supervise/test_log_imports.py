"""The launcher loads structlog without `rich`: structlog's console renderer imports it when installed
(vLLM's images have it) for tracebacks the launcher never logs, ~2.9 MB of RSS for nothing
(bench/results/supervisor.md)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LOGS = REPO / "launcher" / "supervise" / "logs.py"
LOGS_THEN_RICH = """
import sys
import launcher.supervise.logs
print("structlog" in sys.modules, "rich" in sys.modules)
import rich
print(rich.__name__)
"""


def test_the_launchers_logs_load_structlog_without_rich_which_stays_importable() -> None:
    assert importlib.util.find_spec("rich") is not None, "rich (import-linter needs it) must be installed"
    out = subprocess.run(
        [sys.executable, "-c", LOGS_THEN_RICH], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "rich"]


def load_time_imports(tree: ast.AST) -> list[str]:
    """Modules imported when the file loads: everywhere but inside functions (imported when called)."""
    if isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return []
    if isinstance(tree, ast.Import):
        return [alias.name for alias in tree.names]
    if isinstance(tree, ast.ImportFrom):
        return [tree.module or ""]
    return [name for child in ast.iter_child_nodes(tree) for name in load_time_imports(child)]


def test_structlog_is_loaded_by_the_launchers_logs_alone() -> None:
    """Any other module importing it at load time could be the first, and bring rich in."""
    importers = [
        path.relative_to(REPO).as_posix()
        for package in ("launcher", "roles", "healthchecks")
        for path in sorted((REPO / package).rglob("*.py"))
        if any(name.split(".")[0] == "structlog" for name in load_time_imports(ast.parse(path.read_bytes())))
    ]
    assert importers == ["launcher/supervise/logs.py"]
