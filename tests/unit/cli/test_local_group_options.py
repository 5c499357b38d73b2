"""`local-group` refuses a bad option in one line, exit 2, before it re-executes itself under
`unshare` (so before any namespace, bridge or pod exists); good options reach that exec."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from launcher.localgroup.group import GroupLayout


class Exec(Exception):
    """Raised instead of os.execvp: the runner would now become the namespaces' root."""


@pytest.fixture
def execs() -> Iterator[list[list[str]]]:
    calls: list[list[str]] = []

    def execvp(file: str, args: list[str]) -> None:
        calls.append(args)
        raise Exec

    with mock.patch("os.execvp", execvp):
        yield calls


BAD = [
    (["--size", "-1"], "--size"),
    (["--size", "0"], "--size"),
    (["--size", "300"], "--size"),
    (["--size", "244", "--service", "decode=svc", "--service", "prefill=svc2"], "--size"),
    (["--workdir", "/dev/null"], "--workdir"),
    (["--workdir", "/dev/null/sub"], "--workdir"),
    (["--lws-name", "a\nb"], "--lws-name"),
    (["--lws-name", "a/b"], "--lws-name"),
    (["--lws-name", "Upper"], "--lws-name"),
    (["--lws-name", "x" * 60], "--lws-name"),  # its workers' pod names pass 63 characters
    (["--namespace", "a b"], "--namespace"),
    (["--namespace", "a.b"], "--namespace"),
    (["--service", "decode=a/b"], "--service"),
    (["--status-every", "nan"], "--status-every"),
    (["--status-every", "0"], "--status-every"),
    (["--leader-dns-after", "inf"], "--leader-dns-after"),
    (["--pod-env", "2:A=1"], "--pod-env"),
    (["--env", "=1"], "--env"),
]


@pytest.mark.parametrize(("args", "option"), BAD, ids=lambda v: repr(v) if isinstance(v, list) else None)
def test_a_bad_option_is_refused_before_any_namespace_exists(
    run_cli: Any, execs: list[list[str]], args: list[str], option: str
) -> None:
    code, out, err = run_cli("local-group", "--pool", "prefill", *args)
    assert code == 2 and out == "" and execs == [], err
    (line,) = err.splitlines()
    assert line.startswith(f"llm-d-launcher: error: {option}"), line


@pytest.mark.parametrize(
    "args", [[], ["--size", "1"], ["--size", "245"], ["--lws-name", "g", "--namespace", "ns-1"]], ids=repr
)
def test_good_options_reach_the_unshare(
    run_cli: Any, execs: list[list[str]], tmp_path: Path, args: list[str]
) -> None:
    with pytest.raises(Exec):
        run_cli("local-group", "--pool", "prefill", "--workdir", str(tmp_path / "w"), *args)
    assert execs[0][:5] == ["unshare", "-rnm", "--propagation", "private", execs[0][4]]
    assert (tmp_path / "w").is_dir()


def test_every_pod_of_a_full_group_is_inside_the_network() -> None:
    layout = GroupLayout("g", GroupLayout("g", 1).capacity)
    last = layout.pods[-1].ip
    assert last == "10.77.0.254" and layout.network.broadcast_address.compressed != last


def test_restart_always_backs_off_as_the_kubelet_does(tmp_path: Path) -> None:
    """At once the first time, then 10 s doubling up to 5 minutes: a pod that keeps failing does not
    spin the runner (Kubernetes docs, Pod Lifecycle, "Container restarts")."""
    from launcher.localgroup.group import LocalGroup, RunningPod

    layout = GroupLayout("g", 1)
    group = LocalGroup(layout, tmp_path, {}, 8090, restart_always=True)
    pod = RunningPod(layout.pods[0], mock.Mock(), tmp_path / "log", tmp_path / "termination-log")
    delays = []
    for restarts in range(8):
        pod.restarts = restarts
        delays.append(group.schedule_restart(pod, now=1000.0))
        assert pod.restart_at == 1000.0 + delays[-1]
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300]


def test_a_relative_recipe_file_reaches_the_pods_as_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #34: a pod's launcher starts in its mount namespace's root (nsenter --mount), so a
    relative LLMD_RECIPE_FILE found nothing there and the pod parked; the runner resolves it here."""
    from launcher.cli import _parser
    from launcher.localgroup import _request

    def build_parser() -> Any:
        return _parser("local-group")

    (tmp_path / "r.yaml").write_text(
        "name: r\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
    )
    monkeypatch.chdir(tmp_path)
    ns = build_parser().parse_args(["local-group", "--recipe-file", "r.yaml"])
    assert _request(ns).env["LLMD_RECIPE_FILE"] == str(tmp_path / "r.yaml")
    monkeypatch.setenv("LLMD_RECIPE_FILE", "./r.yaml")  # from the environment alike
    assert _request(build_parser().parse_args(["local-group"])).env["LLMD_RECIPE_FILE"] == str(
        tmp_path / "r.yaml"
    )


def test_the_status_line_says_why_a_pod_parked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What /startupz and /readyz answer for a parked pod (a real PodHealth), through the status line."""
    from healthchecks.state import Parked, PodHealth
    from launcher.contract.plan import Check, Probes
    from launcher.localgroup.group import LocalGroup, RunningPod

    health = PodHealth(Probes(1, ready=(), started=Check("engine", "engine")))
    reason = "LLMD_RECIPE_FILE: r.yaml cannot be read (No such file or directory); fix: give its path"
    health.park(Parked(reason, ("LLMD_RECIPE_FILE",), "by a rollout", health.clock()))
    answers = {"startupz": health.startup()[1], "readyz": health.readiness()[1]}
    group = LocalGroup(GroupLayout("g", 1), tmp_path, {}, 1)
    monkeypatch.setattr(group, "_probe", lambda pod, endpoint: answers[endpoint])
    pod = GroupLayout("g", 1).pods[0]
    line = group.status(RunningPod(pod, mock.Mock(), tmp_path / "log", tmp_path / "t"))
    assert line.startswith(f"phase parked ({reason})"), line
