"""Timestamps along the death path, for the per-step table of bench/supervisor_bench.py.

Loaded as `sitecustomize` (the bench puts this directory first on the launcher's PYTHONPATH) when
LLMD_BENCH_STEPS names a file: it wraps the supervisor's reaping, its sweep and its return, the
probe server's stop, the event loop's end and the entry point's `os._exit` from outside, and writes
CLOCK_MONOTONIC times (shared by every process on the host, so the bench can set its own kill time
beside them) to that file just before the process exits. The launcher carries no tracing. A step
the traced tree does not take (another checkout's launcher, for a before/after) is simply absent.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

REAPED = "engine reaped"  # SIGCHLD handled: the engine's exit is known
ALL_REAPED = "every process reaped"  # the sidecars stopped and reaped
SWEPT = "sweep done"  # no descendant left, confirmed
RETURNED = "supervisor returned"
SERVER_STOPPED = "probe server stopped"
LOOP_DONE = "event loop done"  # asyncio's teardown (tasks, executor, signal handlers) behind us
RUN_RETURNED = "run returned"  # exit logged, termination message written
EXITING = "os._exit"  # output flushed; the kernel's part is next


def install(path: str) -> None:
    import healthchecks.server
    import launcher.run
    from launcher.supervise.supervisor import Supervisor

    seen: dict[str, float] = {}
    reap, sweep, run = Supervisor._reap, Supervisor._sweep, Supervisor.run
    stop, run_command, real_exit = healthchecks.server.ProbeServer.stop, launcher.run.run, os._exit

    def traced_reap(self: Supervisor) -> bool:
        now = time.monotonic()
        engine_was_running = self.engine.running
        reaped = reap(self)
        if engine_was_running and not self.engine.running:
            seen.setdefault(REAPED, now)
        if REAPED in seen and not any(s.running for s in self.processes):
            seen.setdefault(ALL_REAPED, now)
        return bool(reaped)  # an older tree's _reap returns None

    async def traced_sweep(self: Supervisor, *args: Any, **kwargs: Any) -> None:
        await sweep(self, *args, **kwargs)
        seen.setdefault(SWEPT, time.monotonic())

    async def traced_run(self: Supervisor) -> Any:
        outcome = await run(self)
        seen.setdefault(RETURNED, time.monotonic())
        return outcome

    async def traced_stop(self: Any) -> None:
        await stop(self)
        if RETURNED in seen:
            seen.setdefault(SERVER_STOPPED, time.monotonic())

    def loop_done(until_complete: Any) -> Any:
        def traced(*args: Any, **kwargs: Any) -> Any:
            result = until_complete(*args, **kwargs)
            seen.setdefault(LOOP_DONE, time.monotonic())
            return result

        return traced

    def traced_run_command(*args: Any, **kwargs: Any) -> int:
        code = run_command(*args, **kwargs)
        seen.setdefault(RUN_RETURNED, time.monotonic())
        return code

    def traced_exit(code: int) -> None:
        seen.setdefault(EXITING, time.monotonic())
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(seen, handle)
        real_exit(code)

    Supervisor._reap = traced_reap  # type: ignore[method-assign]
    Supervisor._sweep = traced_sweep  # type: ignore[method-assign]
    Supervisor.run = traced_run  # type: ignore[method-assign]
    healthchecks.server.ProbeServer.stop = traced_stop  # type: ignore[method-assign]
    asyncio.run = loop_done(asyncio.run)
    if hasattr(launcher.run, "_until_complete"):  # a tree that may leave its loop to the kernel
        launcher.run._until_complete = loop_done(launcher.run._until_complete)
    launcher.run.run = traced_run_command  # the entry point imports it when it runs the command
    os._exit = traced_exit  # type: ignore[assignment]


if os.environ.get("LLMD_BENCH_STEPS"):
    install(os.environ["LLMD_BENCH_STEPS"])
