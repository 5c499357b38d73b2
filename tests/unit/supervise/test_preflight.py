"""launcher/supervise/preflight.py: the local checks before anything is spawned."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from launcher.contract.plan import (
    FileSpec,
    Plan,
    PodIdentity,
    PortSpec,
    ProcessSpec,
    Role,
    RoleKind,
    ShutdownBudget,
)
from launcher.supervise.preflight import (
    ShmCleanup,
    check_binaries,
    check_model,
    check_ports_free,
    check_proc,
    check_runtime_dir,
    clean_shm,
)
from launcher.supervise.shm_ledger import ledger_owner, write_ledger
from tests.unit.supervise.probes import ENGINE_RUNS


def _plan(processes: list[ProcessSpec], files: tuple[FileSpec, ...] = (), model: str | None = None) -> Plan:
    return Plan(
        "r",
        Role("p", RoleKind.LEADER),
        PodIdentity(),
        tuple(processes),
        ShutdownBudget.from_grace(30),
        ENGINE_RUNS,
        files,
        model_path=model,
    )


def test_clean_shm_removes_only_files_of_ours_nobody_holds() -> None:
    root = Path(tempfile.mkdtemp(prefix="llmd-test-", dir="/dev/shm"))  # a tmpfs of our own
    try:
        (root / "psm_5ea1e001").write_bytes(b"x")
        (root / "psm_5ea1e002").write_bytes(b"x")  # nobody holds it, but nothing proves it ours
        (root / "subdir").mkdir()
        held = root / "psm_5ea1e003"
        held.write_bytes(b"x")
        ours = {n: (root / n).stat().st_ino for n in ("psm_5ea1e001", "psm_5ea1e003")}
        write_ledger(root, {ledger_owner(None): ours})
        with held.open("rb"):
            done = clean_shm(str(root))
        assert done.removed == ["psm_5ea1e001"] and done.failed == [] and done.unproven == 1
        assert held.exists() and (root / "psm_5ea1e002").exists() and (root / "subdir").is_dir()
        assert clean_shm(str(root / "absent")) == ShmCleanup()
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


def test_a_proc_of_another_pid_namespace_is_refused(tmp_path: Path) -> None:
    ours, theirs, none = tmp_path / "ours", tmp_path / "theirs", tmp_path / "none"
    for proc in (ours, theirs, none):
        proc.mkdir()
    (ours / "self").symlink_to(str(os.getpid()))
    (theirs / "self").symlink_to("20908")  # pid 1 of `unshare -pf` reading the host's /proc
    assert check_proc(str(ours)) == []
    [problem] = check_proc(str(theirs))
    assert problem.setting == "/proc" and "another PID namespace" in problem.message
    assert "--mount-proc" in problem.fix
    [problem] = check_proc(str(none))
    assert problem.setting == "/proc" and "cannot be read" in problem.message


@pytest.mark.parametrize("key", ["from-a-file\n", "a\rb", "tab\there", "bell\x07", "naïve-ok", "snow☃man"])
def test_a_canary_key_no_header_can_carry_is_refused_naming_the_variable(key: str) -> None:
    """#32 item 4: aiohttp refused such a key at the first canary, an internal error (exit 1)."""
    from dataclasses import replace

    from launcher.contract.plan import ProgressSource, ProgressWatch
    from launcher.supervise.preflight import check_canary_key
    from tests.unit.healthchecks.loopback import completion_canary

    watch = ProgressWatch((ProgressSource("engine", 8000),), ("c",), completion_canary(), 60, 20)
    plan = _plan([ProcessSpec("engine", ("vllm",), {}, True)])
    plan = replace(plan, probes=replace(ENGINE_RUNS, forward=watch))
    problems = check_canary_key(plan, {"VLLM_API_KEY": key})
    if key == "naïve-ok":  # Latin-1 travels in a header
        assert problems == []
        return
    assert [p.setting for p in problems] == ["VLLM_API_KEY"]
    assert key.strip() not in str(problems[0]) and "no HTTP header can carry" in str(problems[0])
    assert check_canary_key(plan, {"VLLM_API_KEY": "fine-key"}) == []
