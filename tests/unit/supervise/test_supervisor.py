"""The Supervisor's life cycle, scripted: a fake Spawner stands in for processes and a virtual-time event
loop for the clock, so restarts, backoff, the crash-loop bound and the shutdown timeline are checked
to the second without a real process or a real wait (tests/supervisor covers what only real
processes show)."""

from __future__ import annotations

import asyncio
import itertools
import selectors
import signal
import stat
from collections.abc import Callable, Coroutine
from contextvars import Context
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typing_extensions import TypeVarTuple, Unpack

from launcher.contract.exits import STALLED
from launcher.contract.plan import FileSpec, Plan, PodIdentity, ProcessSpec, Role, RoleKind, ShutdownBudget
from launcher.contract.redact import Scrubber
from launcher.contract.stop import EngineStop, Failed, StopRequested, Verdict
from launcher.supervise.logs import ChildOutput
from launcher.supervise.outcome import Outcome
from launcher.supervise.spawn import ChildHandle, Descendant
from launcher.supervise.supervisor import (
    Event,
    SignalReceived,
    Supervisor,
    SupervisorConfig,
    restart_delay,
    write_files,
)
from tests.unit.supervise.probes import ENGINE_RUNS

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
BUDGET = ShutdownBudget.from_grace(30)  # engine_deadline 22, kill_at 27, sidecar_window 5, kill_margin 3


# ------------------------------------------------------------------ virtual time
class _Selector(selectors.SelectSelector):
    """Never sleeps: when nothing is ready, the loop's clock jumps to the next timer."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if not ready:
            if timeout is None:
                raise RuntimeError("deadlock: every task waits and no timer is due")
            self.now += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual = _Selector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: Unpack[Ts],
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        """A timer due in less than a float's resolution would never move the clock: a waiter
        counting down to a deadline (remaining = 1e-15) would spin forever."""
        return super().call_at(max(when, self._virtual.now + 1e-6), callback, *args, context=context)


def run_virtual(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


# ------------------------------------------------------------------ fake processes
@dataclass(frozen=True)
class Script:
    """How one start of a fake process behaves."""

    exits_after: float | None = None  # on its own, this long after it starts
    code: int = 0  # ... with this code (-N: killed by signal N)
    on_sigterm: float | None = 0.0  # exits this long after SIGTERM; None: ignores SIGTERM
    sigterm_code: int = 0
    replaced_after: float | None = None  # once it dies, a replacement shows up this long after (a
    # re-spawning daemon's last fork, not yet in the listing when it was killed)
    races: int = 0  # listings of /proc it slips through: during each it forks its heir and exits


@dataclass
class FakeChild:
    name: str
    pid: int
    script: Script
    alive: bool = True
    stdout: None = None
    stderr: None = None


@dataclass
class FakeSpawner:
    scripts: dict[str, list[Script]] = field(default_factory=dict)  # per name, one per start; last repeats
    cannot_start: set[str] = field(default_factory=set)
    starts: list[tuple[float, str]] = field(default_factory=list)
    signals: list[tuple[float, str, int]] = field(default_factory=list)  # (time, process, signal)
    children: dict[int, FakeChild] = field(default_factory=dict)
    listings: int = 0  # calls of descendants(): each lists every process of the host (/proc)
    _exited: list[tuple[int, int]] = field(default_factory=list)
    _on_exit: Callable[[], None] | None = None
    _pids: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def watch(self, on_exit: Callable[[], None]) -> Callable[[], None]:
        self._on_exit = on_exit
        return lambda: None

    def start(self, spec: ProcessSpec, env: dict[str, str]) -> ChildHandle:
        if spec.name in self.cannot_start:
            raise FileNotFoundError(2, "No such file or directory")
        runs = self.scripts.get(spec.name) or [Script()]
        script = runs[min(sum(1 for _, n in self.starts if n == spec.name), len(runs) - 1)]
        child = FakeChild(spec.name, next(self._pids), script)
        self.children[child.pid] = child
        self.starts.append((self.loop.time(), spec.name))
        if script.exits_after is not None:
            self.loop.call_later(script.exits_after, self._exit, child, script.code)
        return child

    def adopt(self, name: str, script: Script) -> FakeChild:
        """A descendant the supervisor did not start (an orphan re-parented to it)."""
        child = FakeChild(name, next(self._pids), script)
        self.children[child.pid] = child
        return child

    def _exit(self, child: FakeChild, code: int) -> None:
        if child.alive:
            child.alive = False
            self._exited.append((child.pid, code))
            assert self._on_exit is not None
            self.loop.call_soon(self._on_exit)  # as SIGCHLD would
            if child.script.replaced_after is not None:
                script = replace(child.script, replaced_after=None)
                self.loop.call_later(child.script.replaced_after, self.adopt, child.name, script)

    def reap(self) -> list[tuple[int, int]]:
        exited, self._exited = self._exited, []
        return exited

    def kill(self, pid: int, sig: int) -> None:
        child = self.children[pid]
        if not child.alive:
            return
        self.signals.append((self.loop.time(), child.name, sig))
        if sig == signal.SIGKILL:
            self._exit(child, -signal.SIGKILL)
        elif sig == signal.SIGTERM and child.script.on_sigterm is not None:
            self.loop.call_later(child.script.on_sigterm, self._exit, child, child.script.sigterm_code)

    def killpg(self, pgid: int, sig: int) -> None:
        self.kill(pgid, sig)  # each fake process is alone in its group

    def descendants(self) -> list[Descendant]:
        self.listings += 1
        heirs = [c for c in self.children.values() if c.alive and c.script.races]
        for child in heirs:
            self._exit(child, 0)  # exits while the listing runs: a zombie by the time it is read
        listed = [Descendant(c.pid, c.pid) for c in self.children.values() if c.alive]
        for child in heirs:  # forked just before: not in the listing
            self.adopt(child.name, replace(child.script, races=child.script.races - 1))
        return listed

    def signalled(self, name: str, sig: int) -> list[float]:
        return [round(t, 6) for t, n, s in self.signals if n == name and s == sig]

    def started(self, name: str) -> list[float]:
        return [round(t, 6) for t, n in self.starts if n == name]


class RecordingLog:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, Any]]] = []

    def debug(self, event: str, **fields: Any) -> None:
        self.records.append(("debug", event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.records.append(("info", event, fields))

    def warning(self, event: str, **fields: Any) -> None:
        self.records.append(("warning", event, fields))

    def error(self, event: str, **fields: Any) -> None:
        self.records.append(("error", event, fields))

    def events(self, level: str) -> list[str]:
        return [event for lvl, event, _ in self.records if lvl == level]


@dataclass
class Pod:
    spawner: FakeSpawner
    log: RecordingLog = field(default_factory=RecordingLog)
    supervisor: Supervisor | None = None
    ended_at: float | None = None  # the loop's time when run() returned


def supervise(
    spawner: FakeSpawner,
    *,
    signals: tuple[tuple[float, int], ...] = (),
    early_signal: int | None = None,
    restarts: int = 3,
    window: float = 300.0,
    budget: ShutdownBudget = BUDGET,
    condemn: tuple[float, Verdict] | None = None,
) -> tuple[Outcome, Pod]:
    """Run an engine and a render sidecar under the fake spawner until the pod ends."""
    pod = Pod(spawner)
    plan = Plan(
        "r",
        Role("p", RoleKind.LEADER),
        PodIdentity(),
        (ProcessSpec("engine", ("vllm",)), ProcessSpec("render", ("render",), critical=False)),
        budget,
        ENGINE_RUNS,
    )
    config = SupervisorConfig(
        bin_path="",
        sidecar_restarts=restarts,
        sidecar_restart_window=window,
        restart_backoff=1.0,
        shm_dir="",
        pod_name=None,
    )

    async def main() -> Outcome:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()
        if early_signal is not None:
            events.put_nowait(SignalReceived(early_signal))
        for at, signum in signals:
            loop.call_later(at, events.put_nowait, SignalReceived(signum))
        output = ChildOutput(as_json=False, scrub=Scrubber(()))
        pod.supervisor = Supervisor(plan, config, events, output, pod.log, clock=loop.time, spawner=spawner)
        if condemn is not None:  # a watcher's verdict (healthchecks/forward.py, peers.py)
            loop.call_later(condemn[0], pod.supervisor.condemn, condemn[1])
        outcome = await pod.supervisor.run()
        pod.ended_at = loop.time()
        return outcome

    return run_virtual(main), pod


# ------------------------------------------------------------------ sidecars
def test_a_crashing_sidecar_restarts_with_exponential_backoff_until_the_crash_loop_bound() -> None:
    spawner = FakeSpawner({"render": [Script(exits_after=1, code=3)]})
    outcome, pod = supervise(spawner, restarts=3)
    # exits at 1, 3, 6 are followed by restarts 1, 2 and 4 s later; the 4th exit (t=11) ends the pod
    assert spawner.started("render") == [0, 2, 5, 10]
    assert spawner.started("engine") == [0]
    assert [f["delay_s"] for _, e, f in pod.log.records if e == "restarting sidecar"] == [1, 2, 4]
    assert outcome.exit_code == 3
    assert outcome.reason.startswith(
        "sidecar render exited with code 3 and crash-looped: 4 exits within 300 s"
    )
    assert spawner.signalled("engine", signal.SIGTERM) == [11]
    assert pod.supervisor is not None and isinstance(pod.supervisor.stop, Failed)
    assert pod.supervisor.process("render").restarts == 3  # type: ignore[union-attr]


@pytest.mark.parametrize(("code", "exit_code"), [(0, 1), (-signal.SIGKILL, 137)])
def test_a_crash_looping_sidecar_ends_the_pod_with_its_code_or_1(code: int, exit_code: int) -> None:
    spawner = FakeSpawner({"render": [Script(exits_after=1, code=code)]})
    outcome, _ = supervise(spawner, restarts=1)
    assert spawner.started("render") == [0, 2]
    assert outcome.exit_code == exit_code


def test_exits_older_than_the_window_are_forgotten() -> None:
    spawner = FakeSpawner({"render": [Script(exits_after=400, code=1)]})
    outcome, pod = supervise(spawner, restarts=1, window=300, signals=((2000, signal.SIGTERM),))
    assert spawner.started("render") == [0, 401, 802, 1203, 1604]  # never two exits in one window
    assert [f["delay_s"] for _, e, f in pod.log.records if e == "restarting sidecar"] == [1, 1, 1, 1]
    assert (outcome.exit_code, outcome.reason) == (0, "stopped by SIGTERM")


def test_a_sidecar_that_cannot_start_is_retried_not_fatal() -> None:
    spawner = FakeSpawner(cannot_start={"render"})
    outcome, _ = supervise(spawner, restarts=2)
    assert spawner.started("render") == []
    assert outcome.exit_code == 127
    assert outcome.reason.startswith("sidecar render exited with code 127 and crash-looped: 3 exits")
    assert outcome.output == ["render could not start: render: No such file or directory"] * 3


# ------------------------------------------------------------------ shutdown
def test_sigterm_stops_the_engine_first_and_the_sidecars_once_it_exited() -> None:
    spawner = FakeSpawner({"engine": [Script(on_sigterm=5)], "render": [Script(on_sigterm=0.5)]})
    outcome, pod = supervise(spawner, signals=((10, signal.SIGTERM),))
    assert spawner.signalled("engine", signal.SIGTERM) == [10]
    assert spawner.signalled("render", signal.SIGTERM) == [15, 15]  # its main process, then its group
    assert spawner.signalled("engine", signal.SIGKILL) == spawner.signalled("render", signal.SIGKILL) == []
    assert (outcome.exit_code, outcome.reason, outcome.output) == (0, "stopped by SIGTERM", [])
    assert pod.supervisor is not None and pod.supervisor.stop == StopRequested(signal.SIGTERM)


def test_an_engine_that_outlives_its_deadline_is_killed_at_kill_at() -> None:
    spawner = FakeSpawner({"engine": [Script(on_sigterm=None)], "render": [Script(on_sigterm=None)]})
    outcome, pod = supervise(spawner, signals=((10, signal.SIGTERM),))
    deadline = 10 + BUDGET.engine_deadline
    # the main process alone; at the deadline, with the sidecars, main process and group again
    assert spawner.signalled("engine", signal.SIGTERM) == [10, deadline, deadline]
    assert spawner.signalled("render", signal.SIGTERM)[0] == deadline
    assert spawner.signalled("engine", signal.SIGKILL)[0] == spawner.signalled("render", signal.SIGKILL)[0]
    assert spawner.signalled("engine", signal.SIGKILL)[0] == pytest.approx(10 + BUDGET.kill_at, abs=0.11)
    assert outcome.exit_code == 137
    assert outcome.reason == "stopped by SIGTERM; engine was killed by SIGKILL while stopping"
    assert "engine still running after its drain window" in pod.log.events("warning")


def test_an_engine_that_dies_of_the_forwarded_sigterm_is_a_clean_stop() -> None:
    spawner = FakeSpawner({"engine": [Script(on_sigterm=1, sigterm_code=-signal.SIGTERM)]})
    outcome, _ = supervise(spawner, signals=((3, signal.SIGTERM),))
    assert outcome.exit_code == 0


def test_a_second_sigint_kills_everything_at_once() -> None:
    spawner = FakeSpawner({"engine": [Script(on_sigterm=None)]})
    outcome, _ = supervise(spawner, signals=((10, signal.SIGINT), (11, signal.SIGINT)))
    assert spawner.signalled("engine", signal.SIGTERM) == [10]
    assert spawner.signalled("engine", signal.SIGKILL) == [11]
    assert outcome.exit_code == 137


# ------------------------------------------------------------------ the engine ends the pod
@pytest.mark.parametrize(
    ("code", "exit_code", "how"),
    [
        (3, 3, "exited with code 3"),
        (-signal.SIGSEGV, 139, "was killed by SIGSEGV"),
        (0, 3, "exited with code 0 although no stop was asked for"),  # EXIT_ENGINE_QUIT
    ],
)
def test_the_engine_ending_ends_the_pod_with_its_code(code: int, exit_code: int, how: str) -> None:
    spawner = FakeSpawner({"engine": [Script(exits_after=5, code=code)], "render": [Script(on_sigterm=None)]})
    outcome, pod = supervise(spawner)
    assert (outcome.exit_code, outcome.reason) == (exit_code, f"engine {how}")
    assert outcome.code_name == {3: "engine-exit", -signal.SIGSEGV: "signalled", 0: "engine-quit"}[code]
    assert spawner.signalled("render", signal.SIGTERM)[0] == 5
    # after a crash nobody waits for a drain: the sidecars get their own window, not the grace period
    assert spawner.signalled("render", signal.SIGKILL) == [
        pytest.approx(5 + BUDGET.sidecar_window + BUDGET.kill_margin, abs=0.11)
    ]
    # Named where the code alone could be a launcher's (an engine's own 3 is not engine-quit).
    name = "signalled" if code < 0 else "engine-exit" if code else ""
    assert pod.supervisor is not None and pod.supervisor.stop == Failed(f"engine {how}", exit_code, name=name)


def test_a_dead_engine_ends_the_pod_the_moment_its_last_process_is_reaped() -> None:
    """Nothing is left to kill, so the final sweep waits for nothing (a fixed pause there made the
    death path 4x slower: bench/results/supervisor.md) and looks once more only."""
    spawner = FakeSpawner({"engine": [Script(exits_after=5, code=-signal.SIGKILL)], "render": [Script()]})
    outcome, pod = supervise(spawner)
    assert outcome.exit_code == 137
    assert pod.ended_at == pytest.approx(5, abs=0.001)  # render stops at once when signalled
    # Each listing reads all of /proc: strays to signal, the look that found all gone, its confirmation.
    assert spawner.listings == 3


def test_a_sweep_that_killed_looks_again_for_a_re_spawned_replacement() -> None:
    """An orphan that ignores SIGTERM and whose replacement shows up after its SIGKILL: the sweep
    pauses before its second look and kills the replacement too."""
    spawner = FakeSpawner({"engine": [Script(exits_after=5, code=1)]})
    spawner.adopt("daemon", Script(on_sigterm=None, replaced_after=0.01))
    outcome, pod = supervise(spawner)
    assert outcome.exit_code == 1
    kill_at = 5 + BUDGET.sidecar_window + BUDGET.kill_margin
    killed = spawner.signalled("daemon", signal.SIGKILL)
    assert len(killed) == 2 and killed[0] == pytest.approx(kill_at, abs=0.11)  # the daemon, then its heir
    assert spawner.descendants() == []
    assert pod.log.events("warning").count("killing what is left") == 2


def test_a_stray_that_forks_its_heir_during_each_listing_is_still_killed_at_the_grace() -> None:
    """Issue #40.6: a stray that exits while /proc is listed, its heir forked too late to be in the
    listing, looked like nothing left: the stop ended at once, the stray alive. A look that reaped
    one is no quiet look; the heir is found and, as it ignores SIGTERM, killed at the grace."""
    spawner = FakeSpawner({"engine": [Script()]})
    spawner.adopt("stray", Script(on_sigterm=None, races=3))
    outcome, _ = supervise(spawner, signals=((1, signal.SIGTERM),))
    assert outcome.exit_code == 0
    assert [c.name for c in spawner.children.values() if c.alive] == []
    assert spawner.signalled("stray", signal.SIGKILL) == [pytest.approx(1 + BUDGET.kill_at, abs=0.11)]


def test_an_engine_that_cannot_start_starts_nothing_else() -> None:
    spawner = FakeSpawner(cannot_start={"engine"})
    outcome, pod = supervise(spawner)
    assert spawner.starts == []
    assert (outcome.exit_code, outcome.reason) == (
        127,
        "engine could not start: vllm: No such file or directory",
    )
    assert "spawn failed" in pod.log.events("error")


# ------------------------------------------------------------------ a signal before anything started
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_queued_before_spawning_starts_nothing_and_exits_0(signum: int) -> None:
    spawner = FakeSpawner()
    outcome, pod = supervise(spawner, early_signal=signum)
    assert spawner.starts == [] and spawner.signals == []
    assert (outcome.exit_code, outcome.reason) == (0, f"stopped by {signal.Signals(signum).name}")
    assert pod.supervisor is not None and pod.supervisor.stop == StopRequested(signum)


# ------------------------------------------------------------------ a watcher condemns the pod
def test_a_condemned_pod_stops_without_a_drain_and_exits_with_the_verdicts_code() -> None:
    """A broken group has nothing worth draining: the engine gets the sidecars' window, not the
    grace period, then everything left is killed."""
    spawner = FakeSpawner({"engine": [Script(on_sigterm=None)]})  # ignores SIGTERM (a hung peer)
    outcome, pod = supervise(spawner, condemn=(10, Verdict("group member worker 1 is gone", 4)))
    assert spawner.signalled("engine", signal.SIGTERM)[0] == pytest.approx(10, abs=0.01)
    assert spawner.signalled("engine", signal.SIGKILL) == [
        pytest.approx(10 + BUDGET.sidecar_window + BUDGET.kill_margin, abs=0.11)
    ]
    assert (outcome.exit_code, outcome.reason) == (4, "group member worker 1 is gone")
    assert pod.supervisor is not None and pod.supervisor.stop == Failed("group member worker 1 is gone", 4)


def test_a_verdict_after_a_stop_began_changes_nothing() -> None:
    spawner = FakeSpawner()
    outcome, _ = supervise(spawner, signals=((5, signal.SIGTERM),), condemn=(6, Verdict("late verdict", 4)))
    assert outcome.exit_code == 0


# ------------------------------------------------------------------ deregistration and watchers' verdicts
DEREGISTER = ShutdownBudget.from_grace(30, 5)  # engine signalled at 5 s, deadline 22 s


def stalled_verdict(reason: str) -> Verdict:
    return Verdict(reason, STALLED.number, EngineStop.STALLED)


def test_a_requested_stop_signals_the_engine_only_after_the_deregistration_delay() -> None:
    spawner = FakeSpawner({"engine": [Script(on_sigterm=2)], "render": [Script(on_sigterm=0.5)]})
    outcome, pod = supervise(spawner, signals=((10, signal.SIGTERM),), budget=DEREGISTER)
    assert pod.supervisor is not None
    assert spawner.signalled("engine", signal.SIGTERM) == [15]  # still serving from 10 to 15, not ready
    assert spawner.signalled("render", signal.SIGTERM)[0] == 17  # once the engine has exited
    assert (outcome.exit_code, outcome.reason) == (0, "stopped by SIGTERM")
    assert "deregistering before the engine is signalled" in pod.log.events("info")


def test_the_engine_deadline_counts_from_the_stop_not_from_the_engines_sigterm() -> None:
    spawner = FakeSpawner({"engine": [Script(on_sigterm=None)], "render": [Script(on_sigterm=None)]})
    supervise(spawner, signals=((10, signal.SIGTERM),), budget=DEREGISTER)
    deadline = 10 + DEREGISTER.engine_deadline
    assert spawner.signalled("engine", signal.SIGTERM) == [15, deadline, deadline]


def test_a_condemned_pod_is_not_deregistered_first_and_exits_with_the_verdicts_code() -> None:
    spawner = FakeSpawner({"engine": [Script(on_sigterm=1)]})
    reason = "engine stalled: engine (:8000) made no progress for 80 s and its canary timed out after 20 s"
    outcome, _ = supervise(spawner, budget=DEREGISTER, condemn=(30, stalled_verdict(reason)))
    assert spawner.signalled("engine", signal.SIGTERM) == [30]  # at once: nothing is served any more
    assert (outcome.exit_code, outcome.reason) == (5, reason)


def test_a_stalled_engine_deaf_to_sigterm_is_killed_after_the_kill_margin() -> None:
    spawner = FakeSpawner({"engine": [Script(on_sigterm=None)], "render": [Script(on_sigterm=0.5)]})
    reason = "engine stalled: engine (:8000) made no progress for 80 s and its canary timed out after 20 s"
    outcome, _ = supervise(spawner, condemn=(30, stalled_verdict(reason)))
    assert spawner.signalled("engine", signal.SIGTERM)[0] == 30
    assert spawner.signalled("engine", signal.SIGCONT) == [30]  # a SIGSTOPped engine may act on it
    assert spawner.signalled("engine", signal.SIGKILL) == [pytest.approx(30 + BUDGET.kill_margin, abs=0.01)]
    assert spawner.signalled("render", signal.SIGTERM)[0] == pytest.approx(30 + BUDGET.kill_margin, abs=0.01)
    assert spawner.signalled("render", signal.SIGKILL) == []  # the sidecar still had its window
    assert (outcome.exit_code, outcome.reason) == (5, reason)


def test_how_the_engine_stops_comes_from_the_verdict_not_from_its_exit_code() -> None:
    """Exit code 5 with a draining verdict: the engine keeps the sidecars' window, no SIGCONT."""
    spawner = FakeSpawner({"engine": [Script(on_sigterm=None)], "render": [Script(on_sigterm=0.5)]})
    outcome, _ = supervise(spawner, condemn=(30, Verdict("a verdict that drains", STALLED.number)))
    assert spawner.signalled("engine", signal.SIGCONT) == []
    assert spawner.signalled("render", signal.SIGTERM)[0] == pytest.approx(
        30 + BUDGET.sidecar_window, abs=0.01
    )
    assert outcome.exit_code == STALLED.number


# ------------------------------------------------------------------ helpers of the supervisor
def test_restart_backoff_doubles_and_caps() -> None:
    assert [restart_delay(n, 1.0) for n in (1, 2, 3, 4, 5, 6, 7)] == [1, 2, 4, 8, 16, 30, 30]


def test_write_files_is_atomic_and_sets_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "store.json"
    target.parent.mkdir()
    target.write_text("old")
    write_files((FileSpec(str(target), '{"new": 1}', mode=0o600),))
    assert target.read_text() == '{"new": 1}'
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["store.json"]  # no temp file left
