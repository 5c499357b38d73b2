"""The Supervisor: runs one pod's Plan as PID 1 and ends it the way LeaderWorkerSet expects.

Read top to bottom for the life cycle (after gunicorn's arbiter and honcho's manager): signal handlers
only enqueue an event; one loop dispatches events (`_on_<event>`); all reaping happens in `_reap`.

- Each process runs in its own process group (setsid) so a signal reaches its whole tree.
- The engine is critical: when it exits, everything stops and the launcher exits with its code, so
  LWS (RecreateGroupOnPodRestart) recreates the group. Sidecars restart with exponential backoff,
  bounded per window; past the bound they are treated as critical.
- Shutdown order (launcher/shutdown.py): `stopping` (what the probes report as not ready) ->
  SIGTERM the engine's main process (it drains, then stops its own workers) -> SIGTERM sidecars and
  what is left of every group -> SIGKILL whatever is left just before the grace deadline.
- The launcher is a child subreaper (or PID 1), so orphaned grandchildren are reaped here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.plan import FileSpec, Plan, ProcessSpec
from launcher.redact import redact_argv
from launcher.supervise.logs import TAIL_LINES, ChildOutput, LineReader
from launcher.supervise.outcome import Outcome, describe_exit, exit_code_of, signal_name
from launcher.supervise.preflight import search_path

BACKOFF_CAP = 30.0  # seconds: the longest a sidecar waits before its next restart
DRAIN_READS = 64  # at most 4 MiB passed on when a process exits, so a chatty orphan cannot stall us
PR_SET_CHILD_SUBREAPER = 36


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


Event = SignalReceived | ChildExited | RestartDue | ShutdownDone


@dataclass(frozen=True)
class SupervisorConfig:
    bin_path: str = ""
    sidecar_restarts: int = 5
    sidecar_restart_window: float = 300.0
    restart_backoff: float = 1.0


@dataclass
class ProcessState:
    """What the supervisor (and the probe server) know about one process of the plan."""

    spec: ProcessSpec
    pid: int | None = None
    popen: subprocess.Popen[bytes] | None = None
    running: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    last_exit: int | None = None
    restarts: int = 0  # total, for metrics
    recent_exits: deque[float] = field(default_factory=deque)  # monotonic times within the window
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))

    @property
    def name(self) -> str:
        return self.spec.name


class Supervisor:
    def __init__(
        self,
        plan: Plan,
        config: SupervisorConfig,
        events: asyncio.Queue[Event],
        output: ChildOutput,
        log: Any,
        clock: Callable[[], float] = time.monotonic,
        on_line: Callable[[str, str], None] | None = None,
    ) -> None:
        """on_line(process name, line): sees every output line (start-up progress is read from it)."""
        self.plan = plan
        self.config = config
        self.events = events
        self.output = output
        self.log = log
        self.clock = clock
        self.processes = [ProcessState(spec) for spec in plan.processes]
        self.on_line = on_line
        self.stopping = False  # the probes report not ready from the first moment of a stop
        self.stop_requested = False  # by a signal, as opposed to a failure
        self.failure: str | None = None  # why a critical process ended the pod, for /livez
        self.outcome: Outcome | None = None
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
    async def run(self) -> Outcome:
        loop = asyncio.get_running_loop()
        become_subreaper()
        loop.add_signal_handler(signal.SIGCHLD, self._reap)
        try:
            write_files(self.plan.files)
            for state in self.processes:
                self._spawn(state)
                if self.stopping:
                    break
            while True:
                event = await self.events.get()
                if isinstance(event, ShutdownDone):
                    break
                self._dispatch(event)
        finally:
            loop.remove_signal_handler(signal.SIGCHLD)
            self._close_readers()
        assert self.outcome is not None
        return self.outcome

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, SignalReceived):
            self._on_signal(event.signum)
        elif isinstance(event, ChildExited):
            self._on_exit(event.pid, event.code)
        elif isinstance(event, RestartDue):
            self._on_restart_due(event.name)

    def _on_signal(self, signum: int) -> None:
        name = signal_name(signum)
        if not self.stopping:
            self.log.info("shutting down", signal=name, grace_s=self.plan.shutdown.grace)
            self._begin_shutdown(f"stopped by {name}", exit_code=None)
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
            return
        if state.spec.critical:
            self._begin_shutdown(
                f"{state.name} {describe_exit(code)}", exit_code_of(code), output=list(state.tail)
            )
            return
        self._schedule_restart(state, code)

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
            self._begin_shutdown(reason, exit_code_of(code) or 1, output=list(state.tail))
            return
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
        executable = _which(spec.argv[0], env["PATH"])
        try:
            popen = subprocess.Popen(
                list(spec.argv),
                executable=executable,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: signals reach its whole tree
                close_fds=True,
            )
        except (OSError, ValueError) as exc:  # ValueError: e.g. a NUL byte in an env value
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            reason = f"{state.name} could not start: {spec.argv[0]}: {detail}"
            self.log.error("spawn failed", process=state.name, error=str(exc))
            if spec.critical:
                self._begin_shutdown(reason, code)
            else:
                state.tail.append(reason)
                self._schedule_restart(state, code)
            return
        state.popen, state.pid, state.running = popen, popen.pid, True
        state.exited = asyncio.Event()
        self._by_pid[popen.pid] = state
        self._groups.add(popen.pid)
        self.log.info("started", process=state.name, pid=popen.pid, argv=redact_argv(spec.argv))
        loop = asyncio.get_running_loop()
        for stream, pipe in (("stdout", popen.stdout), ("stderr", popen.stderr)):
            assert pipe is not None
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
    def _reap(self) -> None:
        """The one place children are reaped: ours and orphans re-parented to us."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            state = self._by_pid.get(pid)
            if state is not None:  # bookkeeping now, so a waiting shutdown sees it at once
                state.running, state.last_exit = False, code
                state.exited.set()
                if state.popen is not None:
                    state.popen.returncode = code  # keep subprocess from waiting on a reaped pid
            self.events.put_nowait(ChildExited(pid, code))
        self._quiet.set()

    # ------------------------------------------------------------------ shutdown
    def _begin_shutdown(self, reason: str, exit_code: int | None, output: list[str] | None = None) -> None:
        """exit_code None: a signal asked us to stop; the engine's own exit code decides."""
        if self.stopping:
            return
        self.stopping = True
        if exit_code is None:
            self.stop_requested = True
        else:
            self.failure = reason
        self.outcome = Outcome(exit_code if exit_code is not None else -1, reason, output or [])
        asyncio.get_running_loop().create_task(self._shutdown(exit_code is None))

    async def _shutdown(self, engine_decides: bool) -> None:
        try:
            await self._stop_everything(engine_decides)
        except Exception as exc:  # never leave run() waiting on an event that will not come
            self.log.error("shutdown failed; killing every process", error=repr(exc))
            self._kill_all(signal.SIGKILL)
        finally:
            self.events.put_nowait(ShutdownDone())

    async def _stop_everything(self, engine_decides: bool) -> None:
        budget = self.plan.shutdown
        started = self.clock()
        engine = self.engine
        if engine.running:
            # The engine's main process only: it drains and then stops its own workers. vLLM's TP
            # workers exit on the first SIGTERM, so signalling the group would abort in-flight work.
            self._signal_main(engine, signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(engine.exited.wait(), timeout=budget.engine_deadline)
            if engine.running:
                self.log.warning(
                    "engine still running after its drain window", waited_s=budget.engine_deadline
                )
        # Sidecars, what is left of the engine's group, and strays that left their groups.
        for state in self.processes:
            self._signal_main(state, signal.SIGTERM)
        self._signal_groups(signal.SIGTERM)
        # A requested stop may use the whole grace period; after a crash nobody is waiting for a
        # drain, and LWS should recreate the group soon.
        window = budget.kill_at if engine_decides else budget.sidecar_window + budget.kill_margin
        if not await self._wait_quiet(started + window):
            self.log.warning(
                "killing processes that outlived their stop window",
                window_s=window,
                pids=[p.pid for p in self._descendants()],
                processes=[s.name for s in self.processes if s.running],
            )
            self._kill_all(signal.SIGKILL)
            await self._wait_quiet(self.clock() + max(0.5, budget.kill_margin - 0.5))
        assert self.outcome is not None
        if engine_decides:
            # A requested stop that completed in time is a clean exit, also for a main process
            # that simply dies of the SIGTERM we forwarded (mooncake_client does).
            code = engine.last_exit
            if code in (None, 0, -signal.SIGTERM):
                self.outcome.exit_code = 0
            else:
                self.outcome.exit_code = exit_code_of(code)
                self.outcome.reason += f"; {engine.name} {describe_exit(code)} while stopping"
                self.outcome.output = list(engine.tail)

    async def _wait_quiet(self, deadline: float) -> bool:
        """Until every process of the plan and every descendant (orphans included) has exited."""
        while True:
            self._reap()  # collect zombies now: a pending SIGCHLD must not outlive us
            if not any(s.running for s in self.processes) and not self._descendants():
                self._reap()  # one that died between the two calls above is a zombie of ours now
                return True
            remaining = deadline - self.clock()
            if remaining <= 0:
                return False
            self._quiet.clear()
            # Woken by every reap; the short timeout catches grandchildren reaped by their own parents.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), timeout=min(remaining, 0.1))

    def _descendants(self) -> list[Any]:
        import psutil

        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            return []
        alive = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                if child.status() != psutil.STATUS_ZOMBIE:
                    alive.append(child)
        return alive

    def _signal_main(self, state: ProcessState, sig: int) -> None:
        if state.running and state.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(state.pid, sig)

    def _signal_groups(self, sig: int) -> None:
        """Our process groups that still hold a descendant of ours (a group id whose members are
        all gone may belong to someone else by now), then descendants outside them."""
        import psutil

        groups: set[int] = set()
        strays = []
        for proc in self._descendants():
            with contextlib.suppress(psutil.Error, OSError):
                group = os.getpgid(proc.pid)
                if group in self._groups:
                    groups.add(group)
                else:
                    strays.append(proc)  # daemonized orphans re-parented to us
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
        for proc in strays:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    def _kill_all(self, sig: int) -> None:
        for state in self.processes:
            self._signal_main(state, sig)
        self._signal_groups(sig)


def _which(binary: str, path: str) -> str:
    import shutil

    return shutil.which(binary, path=path) or binary


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


def become_subreaper() -> None:
    """Orphaned grandchildren are re-parented to us (not to the node's init) so we reap them."""
    if os.getpid() == 1:
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
