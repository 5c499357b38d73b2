"""Timestamps along the death path, for the per-step table of bench/supervisor_bench.py.

Loaded as `sitecustomize` (the bench puts this directory first on the launcher's PYTHONPATH) when
LLMD_BENCH_STEPS names a file: it wraps the supervisor's reaping, its sweep and its return from
outside, and writes CLOCK_MONOTONIC times (shared by every process on the host, so the bench can set
its own kill time beside them) to that file when `run` returns, just before the entry point's
os._exit. The launcher carries no tracing.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

REAPED = "engine reaped"  # SIGCHLD handled: the engine's exit is known
ALL_REAPED = "every process reaped"  # the sidecars stopped and reaped
SWEPT = "sweep done"  # no descendant left, confirmed
RETURNED = "supervisor returned"
RUN_RETURNED = "run returned"  # probe server stopped, loop closed, exit logged; os._exit is next


def install(path: str) -> None:
    import launcher.run
    from launcher.supervise.supervisor import Supervisor

    seen: dict[str, float] = {}
    reap, sweep, run, run_command = Supervisor._reap, Supervisor._sweep, Supervisor.run, launcher.run.run

    def traced_reap(self: Supervisor) -> None:
        now = time.monotonic()
        engine_was_running = self.engine.running
        reap(self)
        if engine_was_running and not self.engine.running:
            seen.setdefault(REAPED, now)
        if REAPED in seen and not any(s.running for s in self.processes):
            seen.setdefault(ALL_REAPED, now)

    async def traced_sweep(self: Supervisor, *args: Any, **kwargs: Any) -> None:
        await sweep(self, *args, **kwargs)
        seen.setdefault(SWEPT, time.monotonic())

    async def traced_run(self: Supervisor) -> Any:
        outcome = await run(self)
        seen.setdefault(RETURNED, time.monotonic())
        return outcome

    def traced_run_command(cli_settings: dict[str, Any]) -> int:
        code = run_command(cli_settings)
        seen.setdefault(RUN_RETURNED, time.monotonic())
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(seen, handle)
        return code

    Supervisor._reap = traced_reap  # type: ignore[method-assign]
    Supervisor._sweep = traced_sweep  # type: ignore[method-assign]
    Supervisor.run = traced_run  # type: ignore[method-assign]
    launcher.run.run = traced_run_command  # the entry point imports it when it runs the command


if os.environ.get("LLMD_BENCH_STEPS"):
    install(os.environ["LLMD_BENCH_STEPS"])
