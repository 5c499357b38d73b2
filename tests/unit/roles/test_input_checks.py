"""Mistakes in the inputs that used to pass with exit 0 (issue #20 part D): a port used twice inside
one pod is refused by `plan` and `run`; a clamped deregistration and a literal secret in a recipe are
said in the plan (and logged by `run`); SGLang's unmodelled KV events are refused with the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Two pods of 2 DP ranks each: rank 1's API port (port + 1) is also rank 0's KV-event port.
CLASH = (
    "name: clash\nmodel: {path: /m}\ndefault_pool: d\npools:\n  d:\n    kind: vllm\n"
    "    layout: data-parallel\n    nodes: 2\n    data_parallel_local: 2\n    port: 8200\n"
    "    supervisor_port: 8208\n    kv_events: {port: 8201}\n"
)
LEADER = {
    "LWS_LEADER_ADDRESS": "10.0.0.4",
    "LWS_GROUP_SIZE": "2",
    "LWS_WORKER_INDEX": "0",
    "POD_IP": "10.0.0.5",
}


def _recipe(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return {"LLMD_RECIPE_FILE": str(path)}


def test_a_port_used_twice_in_one_pod_fails_single_pod_plan(run_cli: Any, tmp_path: Path) -> None:
    code, out, err = run_cli("plan", env={**_recipe(tmp_path, CLASH), **LEADER})
    assert code == 2 and out == ""
    assert "recipe pool d: port 8201 is both engine http-rank1 and engine kv-events-rank0" in err


def test_a_port_used_twice_in_one_pod_fails_run_before_anything_starts(run_cli: Any, tmp_path: Path) -> None:
    """`run` refuses it with the input checks: no probe server, no preflight, no engine."""
    env = {**_recipe(tmp_path, CLASH), **LEADER, "LLMD_TERMINATION_LOG": str(tmp_path / "term")}
    env["LLMD_PARK_SECONDS"] = "0"  # in an LWS group it would park (tests/supervisor/test_parking.py)
    code, _, err = run_cli("run", env=env)
    assert code == 2
    assert "port 8201 is both engine http-rank1 and engine kv-events-rank0" in err
    assert "port 8201 is both" in (tmp_path / "term").read_text()
    assert "preflight" not in err  # stopped before the async preflight began


def test_a_clamped_deregistration_is_said_in_the_plan(plan_json: Any, run_cli: Any) -> None:
    env = {"LLMD_DEREGISTER_SECONDS": "20", "LLMD_GRACE_SECONDS": "60"}
    note = (
        "LLMD_DEREGISTER_SECONDS=20 is cut to 10 s: deregistration may take at most a sixth of "
        "LLMD_GRACE_SECONDS=60, so the drain keeps the rest; for 20 s raise the pod's "
        "terminationGracePeriodSeconds and LLMD_GRACE_SECONDS to 120"
    )
    assert note in plan_json(env=env)["notes"]
    assert f"# note: {note}" in run_cli("plan", env=env)[1]
    assert not any(
        "DEREGISTER" in n for n in plan_json(env={**env, "LLMD_DEREGISTER_SECONDS": "10"})["notes"]
    )


def test_a_literal_secret_in_a_recipe_is_warned_about_never_shown(plan_json: Any, tmp_path: Path) -> None:
    recipe = (
        "name: sec\nmodel: {path: /m}\ndefault_pool: p\n"
        'env: {HF_TOKEN: hf_abcdefghijkl, EMPTY_TOKEN: "", PLAIN: x}\n'
        'pools:\n  p:\n    kind: vllm\n    env: {API_KEY: "$(API_KEY)", DB_PASSWORD: s3cr3t-pw}\n'
    )
    notes = [n for n in plan_json(env=_recipe(tmp_path, recipe))["notes"] if "secret" in n]
    assert [n.split()[2] for n in notes] == ["HF_TOKEN", "DB_PASSWORD"]
    assert "give the pod HF_TOKEN from a Secret (env valueFrom.secretKeyRef)" in notes[0]
    assert not any("hf_abcdefghijkl" in n or "s3cr3t-pw" in n for n in notes)


@pytest.mark.parametrize(
    ("where", "env"),
    [
        ('args: {kv-events-config: \'{"publisher": "zmq"}\'}', {}),
        ("port: 30000", {"LLMD_EXTRA_ARGS": "--kv-events-config {}"}),
    ],
)
def test_sglang_kv_events_config_is_refused_with_the_fix(
    run_cli: Any, tmp_path: Path, where: str, env: dict[str, str]
) -> None:
    recipe = f"name: sg\nmodel: {{path: /m}}\ndefault_pool: p\npools:\n  p:\n    kind: sglang\n    {where}\n"
    code, _, err = run_cli("plan", env={**_recipe(tmp_path, recipe), **env})
    assert code == 2
    assert "kv-events-config" in err and "set the pool's kv_events in the recipe" in err


def test_sglang_kv_events_with_dp_attention_is_refused(run_cli: Any, tmp_path: Path) -> None:
    """SGLang then publishes per DP rank, which the launcher does not model: one line, nothing planned."""
    recipe = (
        "name: sg\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p:\n    kind: sglang\n"
        "    kv_events: {port: 5556}\n    args: {enable-dp-attention: true}\n"
    )
    code, out, err = run_cli("plan", env=_recipe(tmp_path, recipe))
    assert code == 2 and not out
    assert "kv_events with enable-dp-attention" in err and err.count("\n") == 1


def test_run_logs_the_plans_notes_before_preflight(tmp_path: Path) -> None:
    """The notes `plan` shows reach `run`'s log too, even when preflight then fails (no model here)."""
    from tests.ports import free_port

    recipe = (
        f"name: n\nmodel: {{path: {tmp_path}/absent}}\ndefault_pool: p\nenv: {{HF_TOKEN: hf_abcdefghijkl}}\n"
        "pools:\n  p:\n    kind: vllm\n"
    )
    env = {
        "PATH": os.environ["PATH"],
        **_recipe(tmp_path, recipe),
        "POD_IP": "127.0.0.1",
        "LLMD_DEREGISTER_SECONDS": "20",
        "LLMD_PROBE_PORT": str(free_port()),
        "LLMD_LOG_FORMAT": "json",
        "LLMD_TERMINATION_LOG": "",
        "LLMD_SHM_DIR": "",
        "LLMD_RUNTIME_DIR": str(tmp_path / "rt"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "run"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    (logged,) = [json.loads(line) for line in done.stderr.splitlines() if '"plan notes"' in line]
    assert any(n.startswith("LLMD_DEREGISTER_SECONDS=20 is cut to 5 s") for n in logged["notes"])
    assert any(n.startswith("recipe env HF_TOKEN holds a literal value") for n in logged["notes"])
    assert "hf_abcdefghijkl" not in done.stderr
