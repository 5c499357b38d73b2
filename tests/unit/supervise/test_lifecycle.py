"""Each supervised process's life-cycle state, driven by the scripted spawner (no processes, virtual
time): every move the supervisor makes, in order, per process; and an illegal move raises."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from launcher.contract.lifecycle import ALLOWED, IllegalTransition, Lifecycle, move
from launcher.contract.plan import ProcessSpec
from launcher.contract.stop import Verdict
from launcher.supervise import supervisor as supervisor_module
from launcher.supervise.supervisor import ProcessState
from tests.unit.supervise.test_supervisor import FakeSpawner, Script, supervise

S, R, B, STOP, X, F = (
    Lifecycle.STARTING, Lifecycle.RUNNING, Lifecycle.BACKOFF, Lifecycle.STOPPING, Lifecycle.EXITED,
    Lifecycle.FATAL,
)  # fmt: skip


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[Lifecycle]]]:
    """Every move, per process, starting from its first state."""
    seen: dict[str, list[Lifecycle]] = {}

    def recording(process: str, current: Lifecycle, target: Lifecycle) -> Lifecycle:
        seen.setdefault(process, [current]).append(target)
        return move(process, current, target)

    monkeypatch.setattr(supervisor_module, "move", recording)
    yield seen


def test_a_requested_stop_moves_both_processes_through_running_and_stopping(
    moves: dict[str, list[Lifecycle]],
) -> None:
    supervise(FakeSpawner(), signals=((5, signal.SIGTERM),))
    assert moves == {"engine": [S, R, STOP, X], "render": [S, R, STOP, X]}


def test_an_engine_exit_is_fatal_and_the_sidecar_is_stopped(moves: dict[str, list[Lifecycle]]) -> None:
    supervise(FakeSpawner({"engine": [Script(exits_after=4, code=1)]}))
    assert moves == {"engine": [S, R, F], "render": [S, R, STOP, X]}


def test_a_crash_looping_sidecar_backs_off_between_restarts_then_is_fatal(
    moves: dict[str, list[Lifecycle]],
) -> None:
    supervise(FakeSpawner({"render": [Script(exits_after=1, code=3)]}), restarts=2)
    assert moves["render"] == [S, R, B, R, B, R, F]
    assert moves["engine"] == [S, R, STOP, X]


def test_a_sidecar_waiting_for_its_restart_when_the_stop_begins_never_runs_again(
    moves: dict[str, list[Lifecycle]],
) -> None:
    spawner = FakeSpawner({"render": [Script(exits_after=1, code=3)]})
    supervise(spawner, signals=((1.5, signal.SIGTERM),))  # its restart was due at 2
    assert moves["render"] == [S, R, B, X]
    assert spawner.started("render") == [0]


def test_a_signal_before_any_spawn_leaves_every_process_exited_unstarted(
    moves: dict[str, list[Lifecycle]],
) -> None:
    supervise(FakeSpawner(), early_signal=signal.SIGTERM)
    assert moves == {"engine": [S, X], "render": [S, X]}


def test_an_engine_that_cannot_start_is_fatal(moves: dict[str, list[Lifecycle]]) -> None:
    supervise(FakeSpawner(cannot_start={"engine"}))
    assert moves == {"engine": [S, F], "render": [S, X]}


def test_a_verdict_stops_running_processes(moves: dict[str, list[Lifecycle]]) -> None:
    _, pod = supervise(FakeSpawner(), condemn=(3, Verdict("group member worker 1 is gone", 4)))
    assert moves == {"engine": [S, R, STOP, X], "render": [S, R, STOP, X]}
    assert pod.supervisor is not None
    assert [p.lifecycle for p in pod.supervisor.processes] == [X, X]


@pytest.mark.parametrize(
    ("current", "target"),
    [(X, R), (F, R), (STOP, R), (S, STOP), (B, STOP), (R, R), (R, S), (X, X)],
)
def test_an_illegal_move_raises(current: Lifecycle, target: Lifecycle) -> None:
    state = ProcessState(ProcessSpec("engine", ("vllm",)), lifecycle=current)
    with pytest.raises(IllegalTransition, match=f"engine: {current.value} -> {target.value}"):
        state.become(target)
    assert state.lifecycle is current


def test_exited_and_fatal_are_final_and_every_state_is_reachable() -> None:
    assert ALLOWED[X] == ALLOWED[F] == frozenset()
    reachable = {S} | {t for targets in ALLOWED.values() for t in targets}
    assert reachable == set(Lifecycle)
