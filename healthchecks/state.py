"""PodHealth: what the probes answer from. Background checks write results into it; the supervisor's
process table is read directly, so a dead engine or the start of a stop shows in the very next probe,
without waiting for a check to run. Answering never does I/O.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from healthchecks.progress import StartupProgress
from launcher.contract.lifecycle import Lifecycle
from launcher.contract.phases import (
    INITIALIZING,
    LOADING_WEIGHTS,
    PARKED,
    PHASES,
    PREFLIGHT,
    STARTED,
    STARTING,
    STOPPING,
)
from launcher.contract.plan import Check, HttpCheck, Probes, ProcessSpec, TcpCheck
from launcher.contract.stop import Failed, Running, StopRequested, StopState

if TYPE_CHECKING:
    from healthchecks.watcher import Watcher


class ProcessView(Protocol):
    """One row of the supervisor's process table, as the probes and metrics read it."""

    @property
    def spec(self) -> ProcessSpec: ...
    @property
    def name(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def running(self) -> bool: ...
    @property
    def last_exit(self) -> int | None: ...
    @property
    def restarts(self) -> int: ...
    @property
    def lifecycle(self) -> Lifecycle: ...


class ProcessTable(Protocol):
    """What the probes need of the supervisor (launcher/supervise/), without importing it: whether a
    stop began and why, and each process's row."""

    @property
    def stop(self) -> StopState: ...
    @property
    def processes(self) -> Sequence[ProcessView]: ...
    def process(self, name: str) -> ProcessView | None: ...


Answer = tuple[bool, dict[str, Any]]


@dataclass(frozen=True)
class BuildInfo:
    """What this pod runs, for llmd_launcher_build_info: a fleet where one label takes two values
    (engine versions after a partial roll-out, a catalogue older than the engine) shows it."""

    version: str  # the launcher's
    recipe: str
    pool: str
    role: str
    engine: str  # the pool's kind: vllm, sglang, mooncake-master, mooncake-donor
    catalog_version: str  # the engine version the flag catalogue was generated from ("": none)

    def labels(self, engine_version: str) -> list[str]:
        """In the order of BUILD_INFO.labels."""
        return [self.version, self.recipe, self.pool, self.role, self.engine, engine_version,
                self.catalog_version]  # fmt: skip


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    detail: str
    at: float  # monotonic time the check finished
    seconds: float  # how long it took
    pid: int | None = None  # the process it was about: a result outlives no restart


@dataclass(frozen=True)
class Parked:
    """Why the pod is parked (launcher/parking.py), as the probes, /metrics and its peers show it."""

    reason: str  # one line: the problems, each naming its setting and fix
    settings: tuple[str, ...]  # the problems' settings (the metric's labels)
    heals: str  # "in place" (a file, a copy, a port) or "by a rollout" (the container's env)
    since: float  # monotonic


class PodHealth:
    def __init__(self, probes: Probes, clock: Callable[[], float] = time.monotonic) -> None:
        self.probes = probes
        self.clock = clock
        self.launched_at = clock()
        self.identity = ""  # who answers the probes (IDENTITY_HEADER): the pod's name and launch time
        self.parked: Parked | None = None
        self.held_seconds = 0.0  # time start-up was on hold: this pod or a peer parked
        self.hold_limit: float | None = None  # at most this much of it counts (LLMD_PARK_SECONDS)
        self._phase = PREFLIGHT
        self.phase_at = self.launched_at
        self.started_at: float | None = None
        self.results: dict[str, CheckResult] = {}
        self.progress = StartupProgress(probes.progress)
        self.supervisor: ProcessTable | None = None
        self.watchers: tuple[Watcher, ...] = ()  # healthchecks/pod_watchers.py, once the plan is final
        self.watcher_errors: Counter[str] = Counter()  # exceptions inside each, by name (watcher.watching)
        self.dropped_lines: Callable[[], int] = lambda: 0  # output lines a slow log reader cost
        self.flag_catalog: dict[str, object] | None = None  # which catalogue checked the flags, vs installed
        self.build: BuildInfo | None = None  # set by the launcher once the plan is built
        self.changed: Callable[[], None] = lambda: None  # an answer changed: the probe server publishes

    # ------------------------------------------------------------------ written by the launcher
    def use_plan(self, probes: Probes) -> None:
        """The final plan (leader resolved) may name a different leader IP than the first one; a pod
        that parked before it had a plan gets its start-up rules here."""
        self.probes = probes
        if self.started_at is None:
            self.progress = StartupProgress(probes.progress)

    def park(self, parked: Parked) -> None:
        again = self._phase == PARKED
        self.parked = parked
        self.set_phase(PARKED)  # announced there, unless already parked
        if again:
            self.changed()  # a new reason

    def unpark(self, resume: str = PREFLIGHT) -> None:
        """Parking ended (the checks passed, the copy ended, or the pod ends): its time does not count
        against start-up. `resume`: the phase it goes back to, unless engine output moved it meanwhile."""
        if self.parked is not None:
            self.hold(self.clock() - self.parked.since)
            self.parked = None
            if self._phase == PARKED:
                self.set_phase(resume)

    def hold(self, seconds: float) -> None:
        self.held_seconds += seconds

    def held_by(self) -> str | None:
        """Why start-up is on hold now: this pod is parked, or a watcher says so (a peer is parked)."""
        if self.parked is not None:
            return f"parked: {self.parked.reason}"
        return next((why for w in self.watchers if (why := w.holds_startup()) is not None), None)

    def startup_due(self) -> float:
        """When the start-up deadline falls: LLMD_STARTUP_SECONDS after launch, plus the time start-up
        was on hold, up to hold_limit (so the kubelet's startup probe, sized for both, never wins)."""
        held = self.held_seconds if self.hold_limit is None else min(self.held_seconds, self.hold_limit)
        return self.launched_at + self.probes.startup_seconds + held

    def attach(self, supervisor: ProcessTable) -> None:
        self.supervisor = supervisor
        self.set_phase(STARTING)

    def set_phase(self, phase: str) -> None:
        if phase != self._phase and self._phase not in (STARTED, STOPPING):
            self._phase, self.phase_at = phase, self.clock()
            self.changed()

    def on_line(self, process: str, line: str) -> None:
        """Engine output, until start-up ends: it is the only place a loading engine says how far it is."""
        if self.started_at is not None or process != self.probes.started.process:
            return
        if self.progress.feed(line) and self.progress.phase:
            self.set_phase(self.progress.phase)

    def record(self, check: Check, result: CheckResult) -> None:
        before = self.results.get(check.name)
        self.results[check.name] = result
        if result.ok and self.started_at is None and check == self.probes.started:
            self.started_at = result.at
            self.set_phase(STARTED)  # announced there
        elif before is None or before.ok != result.ok:
            self.changed()

    # ------------------------------------------------------------------ read by the probes
    @property
    def engine_version(self) -> str:
        """The engine as installed, once preflight asked its interpreter ("" before, or for services)."""
        installed = (self.flag_catalog or {}).get("installed_version")
        return installed if isinstance(installed, str) else ""

    @property
    def phase(self) -> str:
        if self.parked is not None:  # also after its engine refused its flags and exited (run.py)
            return PARKED
        if self.supervisor is not None and not isinstance(self.supervisor.stop, Running):
            return STOPPING
        return self._phase

    def before_weights(self) -> bool:
        """The engine has not finished loading its weights: an exit now with a refusal's last words is
        a refused configuration, not a crash a fresh group may not repeat (the Supervisor asks)."""
        return self.started_at is None and PHASES.index(self._phase) < PHASES.index(INITIALIZING)

    @property
    def checks(self) -> tuple[Check, ...]:
        """Every check the probes need, once each."""
        unique = {c.name: c for c in (*self.probes.ready, self.probes.started)}
        return tuple(unique.values())

    def watcher(self, name: str) -> Watcher | None:
        return next((w for w in self.watchers if w.name == name), None)

    def process(self, name: str) -> ProcessView | None:
        return None if self.supervisor is None else self.supervisor.process(name)

    def passing(self, check: Check) -> tuple[bool, str]:
        state = self.process(check.process)
        if state is None or state.pid is None:
            return False, f"{check.process} has not started"
        if not state.running:
            return False, f"{check.process} is not running (last exit {state.last_exit})"
        if check.request is None:
            return True, f"{check.process} is running (pid {state.pid})"
        if not isinstance(check.request, (HttpCheck, TcpCheck)):  # a watcher's (e.g. KV events flowing)
            answers = (a for w in self.watchers if (a := w.answer(check)) is not None)
            return next(answers, (False, f"no watcher answers {check.name}"))
        result = self.results.get(check.name)
        if result is None or result.pid != state.pid:
            return False, "not checked yet"
        return result.ok, result.detail

    def liveness(self) -> Answer:
        supervisor = self.supervisor
        if self.parked is not None:  # alive: the kubelet must not restart it (LWS would recreate the group)
            return True, {"live": True, "phase": PARKED, "parked": self.parked.reason}
        if supervisor is None:
            return True, {"live": True, "phase": self.phase}
        stop = supervisor.stop
        for watcher in self.watchers:  # a verdict shows at once, before the supervisor acts on it
            if (reason := watcher.not_live()) is not None:
                return False, {"live": False, "reason": reason, watcher.name: watcher.details()}
        if isinstance(stop, Failed):
            return False, {"live": False, "reason": stop.reason}
        if not isinstance(stop, StopRequested):
            for state in supervisor.processes:
                # Reaped, but the supervisor's loop may not have handled the exit yet.
                if state.spec.critical and state.pid is not None and not state.running:
                    return False, {"live": False, "reason": f"{state.name} exited ({state.last_exit})"}
        facts = {k: v for watcher in self.watchers for k, v in watcher.live_facts().items()}
        return True, {"live": True, "phase": self.phase, **facts}

    def readiness(self) -> Answer:
        phase = self.phase
        if phase == STOPPING:
            return False, {"ready": False, "phase": phase, "failing": {"pod": "shutting down"}}
        if self.parked is not None:
            return False, {"ready": False, "phase": PARKED, "failing": {"parked": self.parked.reason}}
        checks = {c.name: self.passing(c) for c in self.probes.ready}
        failing = {name: detail for name, (ok, detail) in checks.items() if not ok}
        if self.started_at is None and "start-up" not in failing:
            failing["start-up"] = f"not started ({phase})"
        body: dict[str, Any] = {"ready": not failing, "phase": phase}
        if failing:
            body["failing"] = failing
        body["checks"] = {name: {"ok": ok, "detail": detail} for name, (ok, detail) in checks.items()}
        return not failing, body

    def counting_from(self) -> dict[str, float]:
        """The moments /startupz's fields that count seconds count from (the probe process counts them
        on between two publications, healthchecks/probe_process.py)."""
        moments = {"seconds": self.launched_at, "phase_seconds": self.phase_at}
        if self.parked is not None:
            moments["parked_seconds"] = self.parked.since
        return moments

    def startup(self) -> Answer:
        now = self.clock()
        since = {name: round(now - moment, 1) for name, moment in self.counting_from().items()}
        if self.started_at is not None:
            return True, {
                "started": True,
                "phase": self.phase,
                "startup_seconds": round(self.started_at - self.launched_at, 3),
                **({"flag_catalog": self.flag_catalog} if self.flag_catalog else {}),
            }
        if self.parked is not None:
            return False, {
                "started": False,
                "phase": PARKED,
                "seconds": since["seconds"],
                "parked_seconds": since["parked_seconds"],
                "failing": {"parked": self.parked.reason},
            }
        _, detail = self.passing(self.probes.started)
        body: dict[str, Any] = {
            "started": False,
            "phase": self.phase,
            "seconds": since["seconds"],
            "phase_seconds": since["phase_seconds"],
            "waiting_for": f"{self.probes.started.name}: {detail}",
            **self.progress.as_dict(),
            **({"flag_catalog": self.flag_catalog} if self.flag_catalog else {}),
        }
        return False, body

    def stuck_in(self) -> str:
        """Where start-up is, for the deadline's termination message: the phase, how far the weights
        are, what the start-up check still waits for."""
        phase = self.phase
        ratio = self.progress.weight_ratio
        if phase == LOADING_WEIGHTS and ratio is not None:
            phase += f" at {100 * ratio:.0f} %"
        _, detail = self.passing(self.probes.started)
        since = self.clock() - self.phase_at
        held = f"; {self.held_seconds:.0f} s on hold not counted" if self.held_seconds >= 1 else ""
        return f"{phase} (for {since:.0f} s; waiting for {self.probes.started.name}: {detail}{held})"

    @property
    def startup_seconds(self) -> float:
        end = self.started_at if self.started_at is not None else self.clock()
        return end - self.launched_at
