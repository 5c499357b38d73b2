"""`plan --format shell` quotes every value as data: hostile env and recipe text never runs."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Run

HOSTILE = [
    "a\ntouch {canary}/nl\n",
    "$(touch {canary}/cmd)",
    "`touch {canary}/tick`",
    "x' ; touch {canary}/squote ; '",
    'x" ; touch {canary}/dquote ; "',
    "# \ntouch {canary}/hash",
    "\r\ntouch {canary}/cr",
]
RECORDER = '#!/bin/sh\nprintf "%s\\0" "$(basename "$0")" "$@" > "{calls}/$$"\n'


def _recipe(tmp_path: Path, value: str) -> Path:
    path = tmp_path / "recipe.yaml"
    quoted = json.dumps(value)
    path.write_text(
        "name: hostile\nmodel: {path: " + quoted + ", served_name: " + quoted + "}\ndefault_pool: p\n"
        "env: {A_VALUE: " + quoted + "}\n"
        "pools: {p: {kind: vllm, args: {chat-template: " + quoted + ", middleware: [" + quoted + "]}}}\n"
    )
    return path


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_values_are_data(run_cli: Run, tmp_path: Path, template: str) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    value = template.format(canary=canary)
    env = {
        "POD_NAME": value,
        "POD_NAMESPACE": value,
        "NODE_NAME": value,
        "POD_IP": "10.0.0.1",
        "LLMD_EXTRA_ARGS": "--chat-template " + shlex.quote(value),
        "LLMD_EXTRA_ENV": json.dumps({"B_VALUE": value}),
        "LLMD_RECIPE_FILE": str(_recipe(tmp_path, value)),
        "LLMD_RUNTIME_DIR": str(tmp_path / "rt"),
    }
    code, script, err = run_cli("plan", "--format", "shell", env=env)
    assert code == 0, err
    code, plan, err = run_cli("plan", "--format", "json", env=env)
    intended = json.loads(plan)["processes"][0]["argv"]
    assert value in intended and "--chat-template" in intended  # the hostile value reaches the argv

    assert subprocess.run(["sh", "-n"], input=script, text=True, check=False).returncode == 0
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    calls.mkdir()
    (bindir / "vllm").write_text(RECORDER.format(calls=calls))
    (bindir / "vllm").chmod(0o755)
    (bindir / "touch").write_text(RECORDER.format(calls=calls))  # a `touch` that runs is recorded too
    (bindir / "touch").chmod(0o755)
    subprocess.run(
        ["sh", "-c", script],
        env={"PATH": f"{bindir}:/usr/bin:/bin", "POD_IP": "10.0.0.1"},
        check=True,
        timeout=30,
    )
    ran = [f.read_bytes().decode().split("\0")[:-1] for f in calls.iterdir()]
    assert ran == [intended]
    assert list(canary.iterdir()) == []
