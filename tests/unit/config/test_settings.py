"""Each setting is declared once (launcher/config/settings.py); the CLI flags, --help, error fixes and
the settings table (docs/reference/settings.md) are generated from that declaration and must not drift
from it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.config.settings import (
    CLI_FLAGS,
    DOCS,
    Settings,
    env_name,
    env_value,
    fix_for,
    load_settings,
    setting_label,
    settings_table,
)
from tests.unit.user_recipe import engine

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = ROOT / "docs" / "reference" / "settings.md"


def _reference_table() -> str:
    text = REFERENCE.read_text()
    start = text.index("| env | CLI | meaning |")
    return text[start:]


def test_reference_settings_table_matches_the_declarations() -> None:
    assert _reference_table() == settings_table(), (
        "docs/reference/settings.md's table drifted: run `.venv/bin/python scripts/generate_docs.py --write`"
    )


def test_the_generator_prints_the_table() -> None:
    out = subprocess.run(
        [sys.executable, "scripts/generate_docs.py", "--print", "settings.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    table = out[out.index("| env | CLI | meaning |") :]
    assert table == settings_table() and table.count("\n") == len(DOCS) + 2


def test_every_field_is_declared_with_its_documentation() -> None:
    assert list(DOCS) == list(Settings.model_fields)
    assert all(doc.meaning and doc.fix for doc in DOCS.values())
    assert len({env_name(f) for f in DOCS}) == len(DOCS)
    assert len(set(CLI_FLAGS.values())) == len(CLI_FLAGS)


@pytest.mark.parametrize("command", ["plan", "run"])
def test_help_lists_every_flag_and_setting_of_the_command(command: str) -> None:
    text = _help(command)
    for field, flag in CLI_FLAGS.items():
        assert f"{flag} {DOCS[field].metavar}" in text
    sections = {"pod", "plan"} | ({"run"} if command == "run" else set())
    for field, doc in DOCS.items():
        assert (f"  {env_name(field)} " in text) == (doc.section in sections), field


def _help(command: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "launcher.cli", command, "--help"], capture_output=True, text=True, check=True
    ).stdout
    return out


def test_every_flag_reaches_its_setting() -> None:
    from launcher.cli import _cli_settings, _parser

    argv = ["plan"]
    for field, flag in CLI_FLAGS.items():
        argv += [flag, "A=1" if field == "extra_env" else f"v-{field}"]
    values = _cli_settings(_parser().parse_args(argv))
    assert values == {f: {"A": "1"} if f == "extra_env" else f"v-{f}" for f in CLI_FLAGS}


def test_error_lines_carry_the_declared_fix_and_default(run_cli: Any) -> None:
    code, _, err = run_cli("plan", env={"LLMD_PROBE_PORT": "0"})
    default = str(Settings.model_fields["probe_port"].default)
    assert code == 2
    assert "LLMD_PROBE_PORT (--probe-port): input should be greater than or equal to 1 (got '0'); " in err
    assert fix_for("probe_port") in err and f"(default {default})" in err
    assert "{default}" not in "".join(fix_for(f) for f in DOCS)


def test_labels_follow_where_the_value_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    assert setting_label("probe_port", {"probe_port": "x"}) == "--probe-port (LLMD_PROBE_PORT)"
    assert setting_label("probe_port", {}) == "recipe launcher.probe_port (LLMD_PROBE_PORT)"
    assert setting_label("grace_seconds", {}) == "recipe launcher.grace_seconds (LLMD_GRACE_SECONDS)"
    monkeypatch.setenv("LLMD_GRACE_SECONDS", "0")
    assert setting_label("grace_seconds", {}) == "LLMD_GRACE_SECONDS"
    assert setting_label("pod_ip", None) == "POD_IP (--pod-ip)"


def test_recipe_launcher_section_accepts_exactly_the_launcher_keys(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    head = "name: x\nmodel: {path: /m}\ndefault_pool: p\npools: {p: {kind: vllm}}\n"
    path.write_text(head + "launcher: {pod_ip: 10.0.0.1, recipe: y}\n")
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(path)})
    allowed = sorted(f for f, doc in DOCS.items() if doc.launcher_key)
    assert code == 2 and "cannot set pod_ip, recipe" in err and f"use only {', '.join(allowed)}" in err
    assert {"recipe", "recipe_file", "pod_ip", "worker_index"}.isdisjoint(allowed)
    assert {"probe_port", "extra_args", "grace_seconds"} <= set(allowed)


def test_defaults_read_without_settings_are_the_declared_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from healthchecks.probe import _port_from_env
    from launcher.supervise.supervisor import SupervisorConfig
    from roles.context import BuildContext

    assert _port_from_env() == Settings.model_fields["probe_port"].default
    # The plan builders and the supervisor declare no default of their own: the settings' reach them.
    for config in (BuildContext, SupervisorConfig):
        defaults = [f.name for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING]
        assert defaults == [], f"{config.__name__} has defaults of its own: {defaults}"


def test_the_exec_probe_does_not_import_the_settings_stack() -> None:
    """The kubelet forks `llm-d-launcher probe` every period: its parser must not build the settings'
    flags (pydantic), only `plan`, `run` and --help do."""
    code = (
        "import sys, json\nfrom launcher.cli import main\n"
        "main(['probe', 'live', '--port', '1', '--timeout', '0.5'])\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert "launcher.cli" in loaded
    assert not {m for m in loaded if m.split(".")[0] in {"pydantic", "pydantic_settings", "yaml"}}


# ------------------------------------------------------------------ precedence: CLI > env > recipe
def test_precedence_cli_over_env_over_recipe_file(plan_json: Any, user_recipe: str) -> None:
    from_file = engine(plan_json(env={"LLMD_RECIPE_FILE": user_recipe}))
    assert from_file["argv"][-2:] == ["--max-num-seqs", "4"]
    assert from_file["env"].get("MOONCAKE_CONFIG_PATH") is None
    env = {"LLMD_RECIPE_FILE": user_recipe, "LLMD_EXTRA_ARGS": "--max-num-seqs 8"}
    assert engine(plan_json(env=env))["argv"][-2:] == ["--max-num-seqs", "8"]
    cli = engine(plan_json("--extra-args", "--max-num-seqs 16", env=env))
    assert cli["argv"][-2:] == ["--max-num-seqs", "16"]


@pytest.mark.parametrize(
    ("flag", "value", "env_name", "env_value", "read"),
    [
        ("--leader-address", "cli-0.l", "LWS_LEADER_ADDRESS", "env-0.l",
         lambda p: p["role"]["leader_address"]),
        ("--pod-ip", "10.0.0.2", "POD_IP", "10.0.0.1",
         lambda p: p["processes"][0]["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"]),
        ("--worker-index", "1", "LWS_WORKER_INDEX", "0", lambda p: p["role"]["worker_index"]),
        ("--pool", "decode", "LLMD_POOL", "prefill", lambda p: p["role"]["pool"]),
        ("--runtime-dir", "/cli", "LLMD_RUNTIME_DIR", "/env", lambda p: p["files"][0]["path"]),
        ("--recipe", "vllm-single-pod", "LLMD_RECIPE", "kimi-k3.1-pro", lambda p: p["recipe"]),
    ],
)  # fmt: skip
def test_each_cli_flag_overrides_its_env(
    plan_json: Any, flag: str, value: str, env_name: str, env_value: str, read: Any
) -> None:
    base = {
        "LWS_LEADER_ADDRESS": "env-0.l",
        "LWS_GROUP_SIZE": "2",
        "LWS_WORKER_INDEX": "0",
        "POD_IP": "10.0.0.1",
    }
    if flag == "--pool":
        base = {"POD_IP": "10.0.0.1"}
    if flag == "--recipe":
        base = {}
    from_env = read(plan_json(env={**base, env_name: env_value}))
    from_cli = read(plan_json(flag, value, env={**base, env_name: env_value}))
    assert from_env != from_cli
    assert str(from_cli) == value or str(from_cli).startswith(value)


def test_group_size_and_gpus_flags_override_env(run_cli: Any) -> None:
    env = {
        "LWS_LEADER_ADDRESS": "l-0",
        "LWS_GROUP_SIZE": "3",
        "LWS_WORKER_INDEX": "0",
        "LLMD_GPUS_PER_NODE": "8",
    }
    code, _, err = run_cli("plan", env=env)
    assert code == 2 and "LWS_GROUP_SIZE" in err and "LLMD_GPUS_PER_NODE" in err
    code, _, err = run_cli("plan", "--group-size", "2", "--gpus-per-node", "4", env=env)
    assert code == 0, err


def test_recipe_file_flag_overrides_env(plan_json: Any, user_recipe: str) -> None:
    plan = plan_json("--recipe-file", user_recipe, env={"LLMD_RECIPE_FILE": "/nonexistent.yaml"})
    assert plan["recipe"] == "tiny"


SECONDS_FIELDS = [f for f, info in Settings.model_fields.items() if info.annotation is float]


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e309", "Infinity"])
@pytest.mark.parametrize("field", SECONDS_FIELDS)
def test_a_time_setting_must_be_finite(run_cli: Any, field: str, value: str) -> None:
    """inf passed the bounds and then overflowed: int() of the start-up deadline in `plan`, aiohttp's
    timeouts in the watchers, asyncio deadlines (issue #24 items 10, 11). One line, exit 2."""
    code, _, err = run_cli("plan", env={env_name(field): value})
    assert code == 2, err
    (line,) = err.splitlines()
    assert line.startswith(f"llm-d-launcher: error: {env_name(field)}") and "finite" in line, line


def test_park_seconds_forever_means_no_bound(run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`forever`, as --help and docs/running-a-pod.md offer it, is the one infinite time setting: it
    was refused as "not finite" by the settings, and the parking pod fell back to the default."""
    code, _, err = run_cli("plan", env={"LLMD_PARK_SECONDS": "forever", "LLMD_STRICT_ENV": "true"})
    assert (code, err) == (0, "")
    assert env_value("park_seconds", {"LLMD_PARK_SECONDS": "forever"}) == math.inf  # what parking reads
    monkeypatch.setenv("LLMD_PARK_SECONDS", "forever")
    assert load_settings().park_seconds == math.inf


def test_the_time_settings_are_the_watchers_and_deadlines() -> None:
    assert {"check_timeout", "canary_seconds", "startup_seconds", "stall_seconds"} <= set(SECONDS_FIELDS)


def test_a_recipe_cannot_set_an_infinite_start_up_deadline(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    head = "name: x\nmodel: {path: /m}\ndefault_pool: p\npools: {p: {kind: vllm}}\n"
    path.write_text(head + "launcher: {startup_seconds: .inf, canary_seconds: .nan}\n")
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(path)})
    assert code == 2, err
    assert err.splitlines() == [
        "llm-d-launcher: error: recipe launcher.canary_seconds (LLMD_CANARY_SECONDS): input should be a "
        f"finite number (got nan); {fix_for('canary_seconds')}",
        "llm-d-launcher: error: recipe launcher.startup_seconds (LLMD_STARTUP_SECONDS): input should be a "
        f"finite number (got inf); {fix_for('startup_seconds')}",
    ]
