"""Dry-run output: shell is valid sh that reproduces the argv exactly, JSON follows its schema,
secrets are <redacted> in every format."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.contract.redact import REDACTED
from tests.unit.repo.markdown import ROOT, examples

PLAN_PAGE = ROOT / "docs" / "plan-json.md"

DECODE = {"LWS_LEADER_ADDRESS": "d-0.d.ns", "LWS_GROUP_SIZE": "4", "LWS_WORKER_INDEX": "1",
          "POD_IP": "10.1.2.3",
          "LLMD_POOL": "decode"}  # fmt: skip
POOLS = ["prefill", "decode", "tpu", "mooncake-master", "mooncake-donor"]


def _run_shell_with_stub_binaries(
    script: str, tmp_path: Path, env: dict[str, str], expected_calls: int
) -> list[list[str]]:
    """Execute the shell plan with every binary replaced by a recorder of its argv (NUL-separated)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    calls.mkdir()
    recorder = (
        f'#!/bin/sh\nprintf "%s\\0" "$(basename "$0")" "$@" > {tmp_path}/$$ && env -0 > {calls}/$$.env'
        f" && mv {tmp_path}/$$ {calls}/\n"
    )
    for name in ("vllm", "python3", "llm-d-router-disagg-sidecar", "mooncake_master", "mooncake_client"):
        (bindir / name).write_text(recorder)
        (bindir / name).chmod(0o755)
    script = script.replace("/tmp/llm-d-launcher", str(tmp_path / "rt"))
    subprocess.run(
        ["sh", "-c", script + "\nwait\n"],
        env={"PATH": f"{bindir}:/usr/bin:/bin", **env},
        check=True,
        timeout=30,
    )
    # exec replaces the shell, so `wait` never runs: give the background sidecar a moment to record.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(_argv_files(calls)) < expected_calls:
        time.sleep(0.01)
    return [f.read_text().split("\0")[:-1] for f in _argv_files(calls)]


def _argv_files(calls: Path) -> list[Path]:
    return [f for f in calls.iterdir() if f.suffix != ".env"]


def _env_of(calls: Path, program: str) -> dict[str, str]:
    for f in _argv_files(calls):
        if f.read_text().split("\0")[0] == program:
            items = (calls / f"{f.name}.env").read_text().split("\0")
            return dict(item.split("=", 1) for item in items if item)
    raise AssertionError(f"{program} was not run")


@pytest.mark.parametrize("pool", POOLS)
def test_shell_format_runs_the_exact_argv(run_cli: Any, plan_json: Any, tmp_path: Path, pool: str) -> None:
    env = {"LLMD_POOL": pool, "POD_IP": "10.9.8.7"}
    plan = plan_json(env=env)
    code, script, _ = run_cli("plan", "--format", "shell", env=env)
    assert code == 0
    assert subprocess.run(["sh", "-n"], input=script, text=True, check=False).returncode == 0
    pod_env = {"POD_IP": "10.9.8.7", "LWS_LEADER_ADDRESS": "lead-0"}
    calls = _run_shell_with_stub_binaries(script, tmp_path, pod_env, len(plan["processes"]))
    expected = [
        [Path(p["argv"][0]).name, *p["argv"][1:]]
        for p in sorted(plan["processes"], key=lambda p: p["critical"])  # sidecars start first
    ]
    # The shell fills the pod's placeholders from its own env.
    expected = [[a.replace("$(LWS_LEADER_ADDRESS)", "lead-0") for a in argv] for argv in expected]
    assert sorted(calls) == sorted(expected)
    for f in plan["files"]:
        assert (tmp_path / "rt" / Path(f["path"]).name).read_text() == f["content"]


def test_shell_refuses_to_run_without_the_pods_values(run_cli: Any, tmp_path: Path) -> None:
    code, script, _ = run_cli("plan", "--format", "shell")
    assert code == 0 and '"${POD_IP:?POD_IP is not set}"' in script
    proc = subprocess.run(["sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          check=False, cwd=tmp_path)  # fmt: skip
    assert proc.returncode != 0 and "POD_IP is not set" in proc.stderr


@pytest.mark.parametrize("fmt", ["text", "shell", "json"])
def test_secrets_are_redacted_in_every_format(run_cli: Any, fmt: str) -> None:
    secrets = {"HF_TOKEN": "hf_live_abc123", "MY_API_KEY": "k-999-secret", "DB_PASSWORD": "pw-777"}
    env = {**DECODE, "HF_TOKEN": secrets["HF_TOKEN"],
           "LLMD_EXTRA_ENV": json.dumps({"MY_API_KEY": secrets["MY_API_KEY"],
                                         "DB_PASSWORD": secrets["DB_PASSWORD"],
                                         "VLLM_LOGGING_LEVEL": "DEBUG"})}  # fmt: skip
    for group in ([], ["--group"]):
        code, out, err = run_cli("plan", "--format", fmt, *group, env=env)
        assert code == 0
        for value in secrets.values():
            assert value not in out and value not in err
        assert "MY_API_KEY" in out and "DEBUG" in out  # the name shows, the value does not
        if fmt != "shell":
            assert REDACTED in out


def test_json_schema_is_stable(plan_json: Any) -> None:
    plan = plan_json(env=DECODE)
    assert plan["schema"] == "llm-d-launcher/plan/v2"
    assert list(plan) == [
        "schema",
        "recipe",
        "role",
        "pod",
        "placeholders",
        "notes",
        "files",
        "processes",
        "probes",
        "kv_events",
        "shutdown",
        "host_needs",
        "capabilities",
    ]
    assert list(plan["role"]) == [
        "name",
        "pool",
        "kind",
        "worker_index",
        "group_size",
        "leader_address",
        "dp_ranks",
        "parallelism",
    ]
    assert list(plan["processes"][0]) == ["name", "critical", "argv", "env", "ports", "health"]
    group = plan_json("--group", env=DECODE)
    assert group["schema"] == "llm-d-launcher/group/v2" and group["ok"] is True
    assert list(group) == ["schema", "recipe", "pool", "group_size", "ok", "checks", "pods"]
    assert [c["name"] for c in group["checks"]] == ["ranks", "ports", "agreement", "kv-events"]
    assert [p["role"]["worker_index"] for p in group["pods"]] == [0, 1, 2, 3]


def test_readme_documents_the_json_schema() -> None:
    readme = PLAN_PAGE.read_text()
    for key in ("llm-d-launcher/plan/v2", "llm-d-launcher/group/v2", "placeholders", "health", "critical"):
        assert key in readme


def test_main_job_on_a_fresh_machine_says_it_ran_on_defaults(run_cli: Any) -> None:
    code, out, err = run_cli("plan")
    assert code == 0 and err == ""
    notes = [line for line in out.splitlines() if line.startswith("# note:")]
    assert notes == ["# note: no LWS env: planning worker 0 of a group of 2 (the recipe's size)"]
    assert "vllm serve /models/Kimi-K3.1-Pro" in out
    code, out, err = run_cli("plan", "--format", "json")
    assert json.loads(out)["placeholders"] == ["POD_IP", "LWS_LEADER_ADDRESS"]
    assert err.strip() == "note: no LWS env: planning worker 0 of a group of 2 (the recipe's size)"


@pytest.mark.parametrize("pool", POOLS)
def test_group_text_lists_every_pod_and_passes_its_checks(run_cli: Any, pool: str) -> None:
    code, out, err = run_cli("plan", "--group", "--pool", pool)
    assert code == 0, err
    assert "FAIL" not in out
    assert out.count("\nok   ") + out.count("  ok   ") == 4


@pytest.mark.parametrize("index", range(4))
def test_group_shell_runs_the_branch_of_each_pod(
    run_cli: Any, plan_json: Any, tmp_path: Path, index: int
) -> None:
    code, script, _ = run_cli("plan", "--group", "--format", "shell", env={"LLMD_POOL": "decode"})
    assert code == 0 and script.count("#!/bin/sh") == 1
    pod_env = {"POD_IP": "10.9.8.7", "LWS_LEADER_ADDRESS": "d-0", "LWS_WORKER_INDEX": str(index)}
    calls = _run_shell_with_stub_binaries(script, tmp_path, pod_env, 2)
    plan = plan_json(env={**pod_env, "LLMD_POOL": "decode", "LWS_GROUP_SIZE": "4"})
    assert sorted(calls) == sorted([p["argv"] for p in plan["processes"]])


def test_group_shell_refuses_a_pod_outside_the_group(run_cli: Any) -> None:
    _, script, _ = run_cli("plan", "--group", "--format", "shell", env={"LLMD_POOL": "decode"})
    env = {"PATH": "/usr/bin:/bin", "LWS_WORKER_INDEX": "4", "POD_IP": "10.0.0.1"}
    proc = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "outside this group" in proc.stderr


def test_readme_group_example_is_what_plan_prints(run_cli: Any) -> None:
    (example,) = [e for e in examples(PLAN_PAGE) if e.argv == ["plan", "--group"]]
    block = "\n".join(example.output) + "\n"
    env = example.env
    code, out, _ = run_cli("plan", "--group", env=env)
    assert code == 0
    assert block == out


HOSTILE = 'it\'s "quoted" $HOME `id` $(POD_IP) \\ ; & | * ~ \n second line'


def test_shell_keeps_hostile_values_exact(run_cli: Any, plan_json: Any, tmp_path: Path) -> None:
    """Quotes, $, backticks, backslashes, newlines and a literal $(POD_IP) in user data reach the
    process byte for byte: the shell script quotes, it never evaluates."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "name: hostile\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
        f"    args: {{chat-template: {json.dumps(HOSTILE)}}}\n    env: {{WEIRD: {json.dumps(HOSTILE)}}}\n"
    )
    env = {"LLMD_RECIPE_FILE": str(recipe), "POD_IP": "10.0.0.5"}
    plan = plan_json(env=env)
    assert plan["placeholders"] == []  # the real POD_IP is known: nothing to fill in
    _, script, _ = run_cli("plan", "--format", "shell", env=env)
    calls = _run_shell_with_stub_binaries(script, tmp_path, {}, 1)
    assert calls == [["vllm", *plan["processes"][0]["argv"][1:]]]
    assert calls[0][calls[0].index("--chat-template") + 1] == HOSTILE
    assert _env_of(tmp_path / "calls", "vllm")["WEIRD"] == HOSTILE


def test_plan_group_exits_2_when_a_check_fails(run_cli: Any, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "name: clash\nmodel: {path: /m}\ndefault_pool: d\npools:\n  d:\n    kind: vllm\n"
        "    layout: data-parallel\n    nodes: 2\n    data_parallel_local: 2\n    port: 8200\n"
        "    supervisor_port: 8208\n    kv_events: {port: 8201}\n"
    )
    code, out, err = run_cli("plan", "--group", env={"LLMD_RECIPE_FILE": str(recipe)})
    assert code == 2
    assert "FAIL ports" in out
    assert "ports check failed: pod 0: 8201 is both engine http-rank1 and engine kv-events-rank0" in err
    assert "pod 1: 8201 is both engine http-rank3 and engine kv-events-rank2" in err


def test_group_notes_go_to_stderr_for_machine_formats(run_cli: Any) -> None:
    env = {"LWS_LEADER_ADDRESS": "p-0.p.ns", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}
    for fmt in ("json", "shell"):
        code, out, err = run_cli("plan", "--group", "--format", fmt, env=env)
        assert code == 0
        assert err.startswith("note: LWS_LEADER_ADDRESS p-0.p.ns is a DNS name")
    assert "# note: LWS_LEADER_ADDRESS p-0.p.ns" in out  # and the group script carries it too


def test_readme_json_schema_matches_plan_to_dict(plan_json: Any) -> None:
    """docs/plan-json.md's schema block lists exactly the keys the JSON has, at every level shown."""
    readme = PLAN_PAGE.read_text()
    block = readme.split("## Plan JSON (`--format json`)", 1)[1].split("```")[1]
    documented = set(re.findall(r'"(\w+)":', block))
    plan = plan_json(env=DECODE)
    worker = plan_json("--pool", "prefill", "--group-size", "2", env=DECODE)["probes"]["ready"][1]
    probes = plan["probes"]
    watch = plan_json("--pool", "prefill", "--group-size", "2", "--worker-index", "0", env=DECODE)[
        "kv_events"
    ]
    actual = {
        *plan, *plan["role"], *plan["role"]["dp_ranks"], *plan["role"]["parallelism"], *plan["pod"],
        *plan["files"][0],
        *plan["processes"][0], *plan["processes"][0]["ports"][0], *plan["processes"][0]["health"],
        *probes, *probes["ready"][0], *probes["ready"][0]["http"], *worker, *worker["tcp"],
        *watch, *watch["sources"][0], *watch["identity"], *plan["shutdown"], *probes["peers"][0],
        *probes["forward"], *probes["forward"]["sources"][0], *probes["forward"]["canary"],
        *probes["forward"]["steps"],
        *plan_json(env={**DECODE, "LLMD_PD_CANARY_PREFILLER": "p:8000"})["probes"]["pd_canary"],
        *(needs := plan["host_needs"]), *needs["derived_env"][0], *needs["modules"][0],
        *needs["memory"][0], *needs["flag_catalog"], *needs["rdma"], *needs["store_master"],
        *(caps := plan["capabilities"]), *caps["checks"][0], "kind", "what",
    }  # fmt: skip
    assert documented == actual
