"""The pure and local parts of `run`: shutdown budget, backoff, exit codes, redaction of free text,
termination message, preflight checks and atomic files."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.errors import ConfigError
from launcher.plan import FileSpec, Plan, PodIdentity, PortSpec, ProcessSpec, Role, RoleKind, ShutdownBudget
from launcher.redact import Scrubber, secret_values
from launcher.run import write_termination_message
from launcher.supervise.outcome import TERMINATION_LIMIT, Outcome, exit_code_of
from launcher.supervise.preflight import (
    check_binaries,
    check_model,
    check_ports_free,
    check_runtime_dir,
    clean_shm,
)
from launcher.supervise.supervisor import restart_delay, write_files


@given(st.integers(min_value=1, max_value=100_000))
def test_budget_fits_the_grace_period(grace: int) -> None:
    b = ShutdownBudget.from_grace(grace)
    assert 0 <= b.drain <= b.engine_deadline <= b.kill_at < grace
    assert b.drain + b.teardown + b.sidecar_window + b.kill_margin <= grace


@pytest.mark.parametrize(("grace", "drain", "kill_at"), [(10, 6, 9), (30, 17, 27), (90, 75, 85)])
def test_budget_examples(grace: int, drain: int, kill_at: int) -> None:
    budget = ShutdownBudget.from_grace(grace)
    assert (budget.drain, budget.kill_at) == (drain, kill_at)


def test_engine_shutdown_timeout_follows_llmd_grace_seconds(plan_json: Any) -> None:
    engine = plan_json(env={"LLMD_GRACE_SECONDS": "90", "LLMD_DEREGISTER_SECONDS": "0"})["processes"][0][
        "argv"
    ]
    assert engine[engine.index("--shutdown-timeout") + 1] == "75"


@pytest.mark.parametrize(
    ("grace", "asked", "deregister", "drain"), [(90, 5, 5, 70), (30, 5, 5, 12), (12, 5, 2, 5), (5, 5, 0, 3)]
)
def test_deregistration_comes_out_of_the_drain(grace: int, asked: int, deregister: int, drain: int) -> None:
    """The deregistration delay is taken from the drain, capped at a sixth of a short grace period."""
    budget = ShutdownBudget.from_grace(grace, asked)
    base = ShutdownBudget.from_grace(grace)
    assert (budget.deregister, budget.drain) == (deregister, drain)
    assert budget.drain == max(0, base.drain - budget.deregister)
    assert (budget.engine_deadline, budget.kill_at) == (base.engine_deadline, base.kill_at)


@given(st.integers(min_value=1, max_value=100_000), st.integers(min_value=0, max_value=1000))
def test_budget_with_deregistration_fits_the_grace_period(grace: int, deregister: int) -> None:
    b = ShutdownBudget.from_grace(grace, deregister)
    assert b.deregister + b.drain + b.teardown <= b.engine_deadline <= b.kill_at < grace


def test_bad_grace_seconds_is_one_line(run_cli: Any) -> None:
    code, _, err = run_cli("plan", env={"LLMD_GRACE_SECONDS": "0"})
    assert code == 2
    assert err.startswith("llm-d-launcher: error: LLMD_GRACE_SECONDS: ")
    assert "terminationGracePeriodSeconds" in err and len(err.splitlines()) == 1


def test_shutdown_timeout_cannot_be_set_by_hand(run_cli: Any) -> None:
    code, _, err = run_cli("plan", "--extra-args", "--shutdown-timeout 5")
    assert code == 2 and "LLMD_GRACE_SECONDS" in err


def test_restart_backoff_doubles_and_caps() -> None:
    assert [restart_delay(n, 1.0) for n in (1, 2, 3, 4, 5, 6, 7)] == [1, 2, 4, 8, 16, 30, 30]


def test_exit_codes_follow_the_shell_convention() -> None:
    assert (exit_code_of(0), exit_code_of(3), exit_code_of(-9), exit_code_of(-15)) == (0, 3, 137, 143)


def test_scrubber_hides_secret_values_in_text() -> None:
    env = {
        "HF_TOKEN": "hf_abcdefgh",
        "MY_API_KEY": "k-12345678",
        "SHORT_TOKEN": "abc",  # too short to be a credential: hiding it would garble every log
        "TOKENIZERS_PARALLELISM": "false",
        "MAX_TOKENS": "1000000000",
        "HOME": "/root/home",
    }
    scrub = Scrubber(secret_values(env))
    assert scrub("token hf_abcdefgh key k-12345678 home /root/home abc false 1000000000") == (
        "token <redacted> key <redacted> home /root/home abc false 1000000000"
    )
    assert Scrubber([])("unchanged") == "unchanged"


def test_redacted_argv_never_swallows_the_next_flag() -> None:
    from launcher.redact import redact_argv

    argv = ["vllm", "--allow-credentials", "--port", "8000", "--api-key", "sk-1", "--hf-token", "--x"]
    assert redact_argv(argv) == [
        "vllm", "--allow-credentials", "--port", "8000", "--api-key", "<redacted>", "--hf-token", "--x",
    ]  # fmt: skip


def test_termination_message_keeps_the_reason_and_the_newest_lines() -> None:
    outcome = Outcome(3, "engine exited with code 3", [f"line {i} " + "x" * 200 for i in range(100)])
    message = outcome.termination_message()
    assert len(message.encode()) <= TERMINATION_LIMIT
    lines = message.splitlines()
    assert lines[:3] == ["engine exited with code 3", "last output:", "…"]
    assert lines[-1].startswith("line 99 ")
    assert Outcome(1, "short", ["a", "b"]).termination_message() == "short\nlast output:\na\nb"


def test_termination_message_keeps_the_head_within_4_kib(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    message = "engine exited with code 3\n" + "é" * 5000
    write_termination_message(str(path), message)
    written = path.read_bytes()
    assert len(written) <= TERMINATION_LIMIT
    assert written.decode().startswith("engine exited with code 3\n")  # cut at a character boundary


def test_termination_message_skipped_quietly_when_not_writable(tmp_path: Path) -> None:
    write_termination_message(str(tmp_path / "missing-dir" / "log"), "reason")
    write_termination_message("", "reason")


def _plan(processes: list[ProcessSpec], files: tuple[FileSpec, ...] = (), model: str | None = None) -> Plan:
    return Plan(
        "r",
        Role("p", RoleKind.LEADER),
        PodIdentity(),
        tuple(processes),
        ShutdownBudget.from_grace(30),
        files,
        model_path=model,
    )


def test_clean_shm_removes_only_files_nobody_holds() -> None:
    root = Path(tempfile.mkdtemp(prefix="llmd-test-", dir="/dev/shm"))  # a tmpfs of our own
    try:
        (root / "psm_5ea1e001").write_bytes(b"x")
        (root / "psm_5ea1e002").write_bytes(b"x")
        (root / "subdir").mkdir()
        held = root / "psm_5ea1e003"
        held.write_bytes(b"x")
        with held.open("rb"):
            removed, failed = clean_shm(str(root))
        assert sorted(removed) == ["psm_5ea1e001", "psm_5ea1e002"] and failed == []
        assert held.exists() and (root / "subdir").is_dir()
        assert clean_shm(str(root / "absent")) == ([], [])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_port_in_use_names_the_port_and_the_holder() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        plan = _plan([ProcessSpec("engine", ("vllm",), ports=(PortSpec(port, "http"),))])
        problems = check_ports_free(plan)
    assert [p.setting for p in problems] == [f"port {port}"]
    assert f"engine's http port is already in use by pid {os.getpid()} (" in problems[0].message
    assert check_ports_free(plan) == []  # released


def test_model_checks(tmp_path: Path) -> None:
    assert check_model(_plan([], model="Qwen/Qwen3-0.6B")) == []  # a hub id is the engine's business
    assert "does not exist" in check_model(_plan([], model=str(tmp_path / "nope")))[0].message
    assert "holds no config.json" in check_model(_plan([], model=str(tmp_path)))[0].message
    (tmp_path / "config.json").write_text("{}")
    assert check_model(_plan([], model=str(tmp_path))) == []


def test_binaries_are_searched_on_llmd_bin_path_first(tmp_path: Path) -> None:
    tool = tmp_path / "my-engine"
    tool.write_text("#!/bin/sh\n")
    plan = _plan([ProcessSpec("engine", ("my-engine",))])
    assert check_binaries(plan, "") != []
    tool.chmod(0o755)
    assert check_binaries(plan, str(tmp_path)) == []


def test_runtime_dir_must_be_writable(tmp_path: Path) -> None:
    files = (FileSpec(str(tmp_path / "run" / "a.json"), "{}"),)
    assert check_runtime_dir(_plan([], files), str(tmp_path / "run")) == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    problems = check_runtime_dir(_plan([], files), str(blocker / "run"))
    assert problems and problems[0].setting == "LLMD_RUNTIME_DIR"
    assert check_runtime_dir(_plan([]), str(blocker / "run")) == []  # nothing to write: not checked


def test_write_files_is_atomic_and_sets_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "store.json"
    target.parent.mkdir()
    target.write_text("old")
    write_files((FileSpec(str(target), '{"new": 1}', mode=0o600),))
    assert target.read_text() == '{"new": 1}'
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["store.json"]  # no temp file left


def test_unknown_placeholder_refuses_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` never starts a plan with a $(POD_IP) left in it."""
    import asyncio

    import structlog

    from healthchecks.state import PodHealth
    from launcher.config.recipe import RecipeSource, load_recipe
    from launcher.config.settings import load_settings
    from launcher.run import _prepare
    from roles import build_plan

    monkeypatch.setenv("LLMD_RECIPE", "vllm-single-pod")
    settings = load_settings()
    recipe = load_recipe(RecipeSource("vllm-single-pod", None))
    plan = build_plan(settings, recipe)
    with pytest.raises(ConfigError) as err:
        assert plan.probes is not None
        asyncio.run(_prepare(settings, recipe, plan, structlog.get_logger(), ["x"], PodHealth(plan.probes)))
    assert str(err.value).startswith("POD_IP: is not set but the plan needs it")
