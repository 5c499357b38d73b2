"""The Supervisor: runs one pod's Plan as PID 1 and ends it the way LeaderWorkerSet expects.

Read top to bottom for the life cycle (after gunicorn's arbiter and honcho's manager): signal handlers
only enqueue an event; one loop dispatches events (`_on_<event>`); all reaping happens in `_reap`.
Processes are started, signalled and reaped through a Spawner (launcher/supervise/spawn.py), so the
life cycle is scripted in unit tests and real in pods.

- Each process runs in its own process group (setsid) so a signal reaches its whole tree.
- The engine is critical: when it exits, everything stops and the launcher exits with its code, so
  LWS (RecreateGroupOnPodRestart) recreates the group. Sidecars restart with exponential backoff,
  bounded per window; past the bound they are treated as critical.
- Shutdown order (ShutdownBudget in launcher/contract/plan.py): `stop` leaves Running (the probes report not
  ready from then on) -> on a requested stop, the deregistration delay (still serving) -> SIGTERM the
  engine's main process (it drains, then stops its own workers)
  -> SIGTERM sidecars and what is left of every group -> SIGKILL whatever is left at kill_at.
- The launcher is a child subreaper (or PID 1), so orphaned grandchildren are reaped here too.
- Each process has an explicit life-cycle state (launcher/contract/lifecycle.py: starting, running,
  backoff, stopping, exited, fatal); an illegal move raises. A watcher's verdict (PodCondemned) says
  how the engine is stopped (EngineStop), so nothing here reads meaning into an exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.contract.exits import (
    ENGINE_OWN,
    ENGINE_QUIT,
    NOT_RUNNABLE,
    SIGNALLED,
    describe_exit,
    exit_code_of,
    signal_name,
)
from launcher.contract.lifecycle import Lifecycle, move
from launcher.contract.log import Log
from launcher.contract.plan import FileSpec, Plan, ProcessSpec
from launcher.contract.redact import redact_argv
from launcher.contract.stop import RUNNING, EngineStop, Failed, StopRequested, StopState, Verdict
from launcher.supervise.logs import TAIL_LINES, ChildOutput, LineReader
from launcher.supervise.outcome import Outcome, final_outcome
from launcher.supervise.refusal import configuration_error
from launcher.supervise.spawn import Spawner, SubprocessSpawner, search_path

if TYPE_CHECKING:
    from launcher.config.settings import Settings

BACKOFF_CAP = 30.0  # seconds: the longest a sidecar waits before its next restart
DRAIN_READS = 64  # at most 4 MiB passed on when a process exits, so a chatty orphan cannot stall us
RESPAWN_SETTLE = 0.02  # seconds a sweep that killed waits before it looks again for a replacement


def own(code: int) -> str:
    """The exit-code row of a process's own exit (os.waitstatus_to_exitcode form)."""
    return SIGNALLED.name if code < 0 else ENGINE_OWN.name


def restart_delay(recent_restarts: int, base: float) -> float:
    """Exponential backoff: base, 2*base, 4*base, ... capped at BACKOFF_CAP."""
    return float(min(BACKOFF_CAP, base * 2 ** max(0, recent_restarts - 1)))


# ------------------------------------------------------------------------------------------ events
@dataclass(frozen=True)
class SignalReceived:
    signum: int


@dataclass(frozen=True)
class ChildExited:
    pid: int
    code: int  # as os.waitstatus_to_exitcode: -N when killed by signal N


@dataclass(frozen=True)
class RestartDue:
    name: str


@dataclass(frozen=True)
class ShutdownDone:
    pass


@dataclass(frozen=True)
class PodCondemned:
    """A watcher (healthchecks/) found the pod broken although its processes run: end it."""

    verdict: Verdict


Event = SignalReceived | ChildExited | RestartDue | ShutdownDone | PodCondemned


@dataclass(frozen=True)
class SupervisorConfig:
    """The settings the supervisor reads; no defaults here, the settings declare them."""

    bin_path: str
    sidecar_restarts: int
    sidecar_restart_window: float
    restart_backoff: float
    shm_dir: str  # where the segments our processes hold are recorded (shm_ledger.py); empty: nowhere
    pod_name: str | None  # whose they are recorded as (POD_NAME; else the host's name)

    @classmethod
    def from_settings(cls, settings: Settings) -> SupervisorConfig:
        return cls(
            bin_path=settings.bin_path,
            sidecar_restarts=settings.sidecar_restarts,
            sidecar_restart_window=settings.sidecar_restart_window,
            restart_backoff=settings.restart_backoff_seconds,
            shm_dir=settings.shm_dir,
            pod_name=settings.pod_name,
        )


@dataclass
class ProcessState:
    """What the supervisor (and the probe server) know about one process of the plan."""

    spec: ProcessSpec
    pid: int | None = None
    running: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    last_exit: int | None = None
    restarts: int = 0  # total, for metrics
    recent_exits: deque[float] = field(default_factory=deque)  # monotonic times within the window
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    lifecycle: Lifecycle = Lifecycle.STARTING  # moved only through become()

    @property
    def name(self) -> str:
        return self.spec.name

    def become(self, target: Lifecycle) -> None:
        """Raises IllegalTransition for a move the life cycle does not allow (a supervisor bug)."""
        self.lifecycle = move(self.name, self.lifecycle, target)


class Supervisor:
    def __init__(
        self,
        plan: Plan,
        config: SupervisorConfig,
        events: asyncio.Queue[Event],
        output: ChildOutput,
        log: Log,
        clock: Callable[[], float] = time.monotonic,
        on_line: Callable[[str, str], None] | None = None,
        spawner: Spawner | None = None,
        on_stopping: Callable[[], None] | None = None,
        before_weights: Callable[[], bool] = lambda: False,
    ) -> None:
        """on_line(process name, line): sees every output line (start-up progress is read from it).
        on_stopping(): the stop has begun (the probes publish "not ready" at once, not at their next look).
        before_weights(): the engine has not begun loading its weights (PodHealth.before_weights):
        only then is an exit with a refusal's last words a refused configuration, not a crash.
        clock must tick with the event loop's timers (loop.time does; time.monotonic is the default)."""
        self.plan = plan
        self.config = config
        self.events = events
        self.output = output
        self.log = log
        self.clock = clock
        self.spawner: Spawner = spawner or SubprocessSpawner()
        self.processes = [ProcessState(spec) for spec in plan.processes]
        self.on_line = on_line
        self.on_stopping = on_stopping
        self.before_weights = before_weights
        self.stop: StopState = RUNNING  # the probes report not ready from the first moment of a stop
        self._by_pid: dict[int, ProcessState] = {}
        self._groups: set[int] = set()  # every process group we created
        self._readers: dict[int, LineReader] = {}
        self._quiet = asyncio.Event()  # set on each reap: the shutdown waits on it

    @property
    def engine(self) -> ProcessState:
        return self.processes[0]

    def process(self, name: str) -> ProcessState | None:
        return next((s for s in self.processes if s.name == name), None)

    # ------------------------------------------------------------------ life cycle
    @property
    def stopping(self) -> bool:
        """Read from `stop`, never stored: the one fact is how the stop began."""
        return self.stop != RUNNING

    async def run(self) -> Outcome:
        unwatch = self.spawner.watch(self._on_sigchld)
        recording: asyncio.Task[None] | None = None
        try:
            write_files(self.plan.files)
            while not self.events.empty():  # a signal that came before us: start nothing
                self._dispatch(self.events.get_nowait())
            for state in self.processes:
                if self.stopping:
                    break
                self._spawn(state)
            if self.config.shm_dir:
                recording = asyncio.create_task(self._record_shm(self.config.shm_dir), name="shm ledger")
            while True:
                event = await self.events.get()
                if isinstance(event, ShutdownDone):
                    break
                self._dispatch(event)
        finally:
            if recording is not None:
                recording.cancel()
            unwatch()
            self._close_readers()
        engine = self.engine
        return final_outcome(self.stop, engine.name, engine.last_exit, engine.tail)

    async def _record_shm(self, directory: str) -> None:
        """Soon after spawning, then every SAMPLE_EVERY s: the shared-memory files our descendants
        hold go into the ledger, the proof the next start's clean-up needs to remove them."""
        from launcher.supervise.preflight import in_daemon_thread, stale_shm
        from launcher.supervise.shm_ledger import FIRST_SAMPLE_AFTER, SAMPLE_EVERY, record_held

        pattern = stale_shm(self.plan.needs.shm_segments)

        def sample() -> None:
            record_held(directory, pattern, [d.pid for d in self.spawner.descendants()], self.config.pod_name)

        await asyncio.sleep(FIRST_SAMPLE_AFTER)
        while True:
            try:
                await in_daemon_thread(sample)
            except OSError as exc:  # e.g. a read-only directory: said once; the clean-up removes nothing
                self.log.warning(
                    "cannot record held shared-memory files", directory=directory, error=str(exc)
                )
                return
            await asyncio.sleep(SAMPLE_EVERY)

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, SignalReceived):
            self._on_signal(event.signum)
        elif isinstance(event, ChildExited):
            self._on_exit(event.pid, event.code)
        elif isinstance(event, RestartDue):
            self._on_restart_due(event.name)
        elif isinstance(event, PodCondemned) and not self.stopping:
            verdict = event.verdict
            self.log.error("ending the pod", reason=verdict.reason, code=verdict.exit_code)
            self._begin_shutdown(Failed.of(verdict))

    def condemn(self, verdict: Verdict) -> None:
        """Ends the pod from outside the loop (a watcher's verdict), as a crash would."""
        self.events.put_nowait(PodCondemned(verdict))

    def _on_signal(self, signum: int) -> None:
        name = signal_name(signum)
        if not self.stopping:
            self.log.info("shutting down", signal=name, grace_s=self.plan.shutdown.grace)
            self._begin_shutdown(StopRequested(signum))
        elif signum == signal.SIGINT:  # a second Ctrl-C at a terminal: do not make people wait
            self.log.warning("second SIGINT: killing every process now")
            self._kill_all(signal.SIGKILL)

    def _on_exit(self, pid: int, code: int) -> None:
        state = self._by_pid.pop(pid, None)
        if state is None:
            self.log.info("reaped orphaned process", pid=pid, code=exit_code_of(code))
            return
        self._drain_output(state)
        level = self.log.info if self.stopping or code == 0 else self.log.error
        level("process exited", process=state.name, pid=pid, code=exit_code_of(code), how=describe_exit(code))
        if self.stopping:
            state.become(Lifecycle.EXITED)
            return
        if state.spec.critical:
            # Nobody asked it to stop, so even a 0 is a failure (vLLM's DP supervisor exits 0 after
            # tearing down its ranks when one died): LWS must see a failed pod and recreate the group.
            if code == 0:
                failed = Failed(ENGINE_QUIT.says(process=state.name), ENGINE_QUIT.number, tuple(state.tail))
            else:
                failed = Failed(
                    f"{state.name} {describe_exit(code)}",
                    exit_code_of(code),
                    tuple(state.tail),
                    name=own(code),
                    refusal=self._refusal(state, code),
                )
            state.become(Lifecycle.FATAL)
            self._begin_shutdown(failed)
            return
        self._schedule_restart(state, code)

    def _refusal(self, state: ProcessState, code: int) -> str:
        """The engine's refused configuration, when this exit is one (launcher/supervise/refusal.py)."""
        if state is not self.engine or code <= 0 or not self.before_weights():
            return ""
        progress = self.plan.probes.progress
        return configuration_error(state.tail, progress.refusal if progress else None) or ""

    def _schedule_restart(self, state: ProcessState, code: int) -> None:
        now = self.clock()
        window = self.config.sidecar_restart_window
        while state.recent_exits and now - state.recent_exits[0] > window:
            state.recent_exits.popleft()
        state.recent_exits.append(now)
        if len(state.recent_exits) > self.config.sidecar_restarts:
            reason = (
                f"sidecar {state.name} {describe_exit(code)} and crash-looped: "
                f"{len(state.recent_exits)} exits within {window:g} s "
                f"(LLMD_SIDECAR_RESTARTS={self.config.sidecar_restarts})"
            )
            state.become(Lifecycle.FATAL)
            self._begin_shutdown(Failed(reason, exit_code_of(code) or 1, tuple(state.tail), name=own(code)))
            return
        state.become(Lifecycle.BACKOFF)
        delay = restart_delay(len(state.recent_exits), self.config.restart_backoff)
        self.log.warning(
            "restarting sidecar",
            process=state.name,
            attempt=len(state.recent_exits),
            allowed=self.config.sidecar_restarts,
            window_s=window,
            delay_s=delay,
        )
        asyncio.get_running_loop().call_later(delay, self.events.put_nowait, RestartDue(state.name))

    def _on_restart_due(self, name: str) -> None:
        state = self.process(name)
        if state is None or self.stopping or state.running:
            return
        state.restarts += 1
        self._spawn(state)

    # ------------------------------------------------------------------ spawning and output
    def _spawn(self, state: ProcessState) -> None:
        spec = state.spec
        env = {**os.environ, **spec.env}
        env["PATH"] = search_path(self.config.bin_path, env)
        try:
            child = self.spawner.start(spec, env)
        except (OSError, ValueError) as exc:  # ValueError: e.g. a NUL byte in an env value
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            reason = f"{state.name} could not start: {spec.argv[0]}: {detail}"
            self.log.error("spawn failed", process=state.name, error=str(exc))
            if spec.critical:
                state.become(Lifecycle.FATAL)
                self._begin_shutdown(Failed(reason, code, name=NOT_RUNNABLE.name))
            else:
                state.tail.append(reason)
                self._schedule_restart(state, code)
            return
        state.pid, state.running = child.pid, True
        state.become(Lifecycle.RUNNING)
        state.exited = asyncio.Event()
        self._by_pid[child.pid] = state
        self._groups.add(child.pid)
        self.log.info("started", process=state.name, pid=child.pid, argv=redact_argv(spec.argv))
        loop = asyncio.get_running_loop()
        for stream, pipe in (("stdout", child.stdout), ("stderr", child.stderr)):
            if pipe is None:
                continue
            reader = LineReader(state, stream, pipe, self.output, self.on_line)
            os.set_blocking(reader.fd, False)
            self._readers[reader.fd] = reader
            loop.add_reader(reader.fd, self._on_readable, reader)

    def _on_readable(self, reader: LineReader) -> None:
        if reader.read() is False:
            self._close_reader(reader)

    def _drain_output(self, state: ProcessState) -> None:
        """Pass on what the process wrote before it exited, before anything reports its exit (a
        bounded amount: a grandchild may still hold the pipe and keep writing)."""
        for reader in [r for r in self._readers.values() if r.state is state]:
            for _ in range(DRAIN_READS):
                if not reader.read():
                    break
            reader.flush()  # its last words may lack a newline

    def _close_reader(self, reader: LineReader) -> None:
        reader.flush()
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(reader.fd)
        self._readers.pop(reader.fd, None)
        with contextlib.suppress(OSError):
            reader.pipe.close()

    def _close_readers(self) -> None:
        for reader in list(self._readers.values()):
            for _ in range(DRAIN_READS):
                if not reader.read():
                    break
            self._close_reader(reader)

    # ------------------------------------------------------------------ reaping
    def _on_sigchld(self) -> None:
        self._reap()

    def _reap(self) -> bool:
        """The one place children are reaped: ours and orphans re-parented to us. True if any was."""
        exited = self.spawner.reap()
        for pid, code in exited:
            state = self._by_pid.get(pid)
            if state is not None:  # bookkeeping now, so a waiting shutdown sees it at once
                state.running, state.last_exit = False, code
                state.exited.set()
            self.events.put_nowait(ChildExited(pid, code))
        self._quiet.set()
        return bool(exited)

    # ------------------------------------------------------------------ shutdown
    def _begin_shutdown(self, stop: StopRequested | Failed) -> None:
        """The first stop wins: a crash during a requested stop is judged by final_outcome."""
        if self.stopping:
            return
        self.stop = stop
        for state in self.processes:
            if state.lifecycle is Lifecycle.RUNNING:
                state.become(Lifecycle.STOPPING)
            elif state.lifecycle in (Lifecycle.STARTING, Lifecycle.BACKOFF):
                state.become(Lifecycle.EXITED)  # it will not run again
        if self.on_stopping is not None:
            self.on_stopping()
        asyncio.get_running_loop().create_task(self._shutdown(isinstance(stop, StopRequested)))

    async def _shutdown(self, requested: bool) -> None:
        try:
            await self._stop_everything(requested)
        except Exception as exc:  # never leave run() waiting on an event that will not come
            self.log.error("shutdown failed; killing every process", error=repr(exc))
            self._kill_all(signal.SIGSTOP)
            self._kill_all(signal.SIGKILL)
        finally:
            self.events.put_nowait(ShutdownDone())

    async def _stop_everything(self, requested: bool) -> None:
        budget = self.plan.shutdown
        started = self.clock()
        engine = self.engine
        if requested and budget.deregister > 0 and engine.running:
            # Not ready since t = 0 but still serving, until endpoints and the router stop sending:
            # what they send meanwhile is served, not refused. After a failure nobody is served.
            self.log.info("deregistering before the engine is signalled", wait_s=budget.deregister)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(engine.exited.wait(), timeout=budget.deregister)
        if engine.running:
            # The engine's main process only: it drains and then stops its own workers. vLLM's TP
            # workers exit on the first SIGTERM, so signalling the group would abort in-flight work.
            # A pod condemned while its engine runs (a group member gone) has nothing worth draining;
            # a stalled engine has shown it will not finish anything, so it gets only the kill margin.
            stalled = isinstance(self.stop, Failed) and self.stop.engine is EngineStop.STALLED
            window = budget.engine_deadline if requested else budget.sidecar_window
            deadline = started + (budget.kill_margin if stalled else window)
            self._signal_main(engine, signal.SIGTERM)
            if stalled and engine.pid is not None:  # a stopped process (SIGSTOP, a freezer) in its
                self.spawner.killpg(engine.pid, signal.SIGCONT)  # group could not act on the SIGTERM
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(engine.exited.wait(), timeout=max(0.0, deadline - self.clock()))
            if engine.running:
                self.log.warning("engine still running after its drain window", waited_s=deadline - started)
                if stalled and engine.pid is not None:  # its whole group: sidecars keep their window
                    self.spawner.killpg(engine.pid, signal.SIGKILL)
        # Sidecars, what is left of the engine's group, and strays that left their groups.
        for state in self.processes:
            self._signal_main(state, signal.SIGTERM)
        self._signal_groups(signal.SIGTERM)
        # A requested stop may use the whole grace period; after a crash nobody is waiting for a
        # drain, and LWS should recreate the group soon.
        window = budget.kill_at if requested else budget.sidecar_window + budget.kill_margin
        quiet = await self._wait_quiet(started + window)
        if not quiet:
            self.log.warning(
                "killing processes that outlived their stop window",
                window_s=window,
                pids=self._descendants(),
                processes=[s.name for s in self.processes if s.running],
            )
        await self._sweep(self.clock() + max(0.5, budget.kill_margin - 0.5), seen_quiet=quiet)

    async def _sweep(self, deadline: float, seen_quiet: bool) -> None:
        """Until nothing of ours is left, seen twice in a row (a listing of /proc can miss a process
        that is being forked or re-parented; seen_quiet: the look just before was the first): each
        round freezes every descendant first (SIGSTOP) so none can fork a replacement between the
        listing and its SIGKILL (a re-spawning daemon). Only a sweep that had to kill pauses before
        its second look, for such a replacement to show: when nothing was left (the usual end, an
        engine's death included), nothing is waited for."""
        quiet, killed = int(seen_quiet), False
        while quiet < 2 and self.clock() < deadline:
            if await self._wait_quiet(self.clock()):
                quiet += 1
                if killed and quiet == 1:
                    await asyncio.sleep(RESPAWN_SETTLE)
                continue
            quiet, killed = 0, True
            self.log.warning("killing what is left", pids=self._descendants())
            self._kill_all(signal.SIGSTOP)
            self._kill_all(signal.SIGKILL)
            await self._wait_quiet(min(deadline, self.clock() + 0.05))

    async def _wait_quiet(self, deadline: float) -> bool:
        """Until every process of the plan and every descendant (orphans included) has exited."""
        while True:
            self._reap()  # collect zombies now: a pending SIGCHLD must not outlive us
            # One that exited during the listing is a zombie of ours now, reaped here, and the
            # successor it may have forked meanwhile was not listed (a re-forking stray): look again.
            if not any(s.running for s in self.processes) and not self._descendants() and not self._reap():
                return True
            remaining = deadline - self.clock()
            if remaining <= 0:
                return False
            self._quiet.clear()
            # Woken by every reap; the short timeout catches grandchildren reaped by their own parents.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), timeout=min(remaining, 0.1))

    def _descendants(self) -> list[int]:
        return [d.pid for d in self.spawner.descendants()]

    def _signal_main(self, state: ProcessState, sig: int) -> None:
        if state.running and state.pid is not None:
            self.spawner.kill(state.pid, sig)

    def _signal_groups(self, sig: int) -> None:
        """Our process groups that still hold a descendant of ours (a group id whose members are
        all gone may belong to someone else by now), then descendants outside them."""
        descendants = self.spawner.descendants()
        for group in {d.pgid for d in descendants if d.pgid in self._groups}:
            self.spawner.killpg(group, sig)
        for stray in descendants:
            if stray.pgid not in self._groups:  # daemonized orphans re-parented to us
                self.spawner.kill(stray.pid, sig)

    def _kill_all(self, sig: int) -> None:
        for state in self.processes:
            self._signal_main(state, sig)
        self._signal_groups(sig)


def write_files(files: tuple[FileSpec, ...]) -> None:
    """Atomically: a reader (the engine, a restarted sidecar) sees the old file or the new, never half."""
    for spec in files:
        target = Path(spec.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(spec.content)
                handle.flush()
                os.fchmod(handle.fileno(), spec.mode)
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
