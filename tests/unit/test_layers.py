"""The layering the README draws: the import contract runs in tests/run.sh (`lint-imports`); these
check what a contract cannot: which modules the dry-run path loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("asyncio", "aiohttp", "zmq", "healthchecks.server", "launcher.supervise.supervisor")


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "LLMD_RECIPE": "kimi-k3.1-pro"},
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import launcher.cli",
        "from launcher.cli import main\nmain(['plan', '--format', 'json'])",
        "from launcher.cli import main\nmain(['plan', '--group', '--pool', 'decode'])",
    ],
    ids=["import", "plan", "plan-group"],
)
def test_dry_run_loads_no_event_loop_or_sockets(code: str) -> None:
    """pydantic-settings (2.16) imports asyncio itself (`pydantic_settings/main.py`, for its async CLI
    commands); the launcher's own dry-run code adds none of these on top of its settings library."""
    loaded = _loaded_after(code) - _loaded_after("import pydantic_settings")
    assert not {m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY}
