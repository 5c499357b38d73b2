"""The watcher protocol: what every background watcher of the pod offers the probes, /metrics and the
supervisor. A watcher runs until cancelled or until it finds the pod broken; then `run` returns a
Verdict that carries how the pod must stop, and run.py hands it to the supervisor. An Observer is the
watcher that never gives a verdict (the P/D canary): it counts and shows, and may answer a readiness
check, but nothing it sees ends the pod.

The pod's watchers are built from the plan by healthchecks/pod_watchers.py and run by `watching`;
PodHealth and healthchecks/metrics.py iterate over them (docs/adding-a-watcher.md).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Protocol

from prometheus_client.core import Metric

from launcher.contract.exits import INTERNAL_ERROR
from launcher.contract.log import Log
from launcher.contract.plan import Check
from launcher.contract.stop import EngineStop, Verdict


class Watcher(Protocol):
    """Subclass it (the methods below are defaults) and add one line to pod_watchers.build_watchers."""

    name: str  # the key of its details in /livez, and its log name

    async def run(self) -> Verdict | None:
        """Until cancelled (None), or until the pod must end: the verdict, returned once."""
        ...

    def not_live(self) -> str | None:
        """Why /livez must fail now (its verdict, before the supervisor acts on it); None: no objection."""
        return None

    def holds_startup(self) -> str | None:
        """Why this pod's start-up deadline must not run now (a peer is parked); None: no reason."""
        return None

    def answer(self, check: Check) -> tuple[bool, str] | None:
        """Its answer to a readiness check of the plan it owns (KV events flowing); None: not its check."""
        return None

    def live_facts(self) -> dict[str, Any]:
        """What /livez states while live: settled facts, never changing with time (a bound)."""
        return {}

    def details(self) -> dict[str, Any]:
        """What it sees, for people (/livez when it objects, /kvevents)."""
        return {}

    def metrics(self) -> Iterable[Metric]:
        """Its metric families, read at scrape time, built from declarations in healthchecks/metrics.py."""
        return ()


class Observer(Watcher):
    """A watcher that is never a liveness verdict: its failures are as often someone else's (a P/D
    peer), or they gate readiness only. `run` watches until cancelled and returns nothing; `not_live`
    is always None. It shows what it sees in live_facts, details and metrics; answer() may gate
    readiness."""

    async def run(self) -> None:
        """Until cancelled: never a verdict."""
        ...

    def not_live(self) -> str | None:
        return None  # never: nothing it sees ends the pod


@contextlib.asynccontextmanager
async def watching(
    watchers: Sequence[Watcher],
    condemn: Callable[[Verdict], None],
    log: Log,
    errors: Counter[str],
    retry: float,
) -> AsyncIterator[None]:
    """Each watcher runs as a task while the body does; a verdict it returns goes to `condemn`. An
    exception inside a watcher is counted in `errors` (llmd_launcher_watcher_errors_total), logged in
    one line, and the watcher runs again `retry` seconds later: a bug in one check never ends the
    watching silently. A task that stops anyway (cancelled from outside) ends the pod with exit 1
    naming the watcher: a pod whose watch is blind must not pass for a watched one."""
    import asyncio

    async def keep(watcher: Watcher) -> None:
        while True:
            try:
                verdict = await watcher.run()
            except Exception as exc:
                errors[watcher.name] += 1
                why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                log.error(f"watcher {watcher.name} failed; watching again in {retry:g} s", error=why)
                await asyncio.sleep(retry)
                continue
            if verdict is not None:
                condemn(verdict)
            return

    leaving = False

    def stopped(task: asyncio.Task[None]) -> None:
        if not leaving and task.cancelled():
            reason = INTERNAL_ERROR.says(error=f"{task.get_name()} stopped (cancelled); the pod is unwatched")
            condemn(Verdict(reason, INTERNAL_ERROR.number, EngineStop.DRAIN))

    tasks = [asyncio.create_task(keep(w), name=f"watcher {w.name}") for w in watchers]
    for task in tasks:
        task.add_done_callback(stopped)
    try:
        yield
    finally:
        leaving = True
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
