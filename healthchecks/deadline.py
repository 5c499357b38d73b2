"""The start-up deadline (LLMD_STARTUP_SECONDS): start-up not ended that long after launch ends the
pod, naming where it is stuck. The kubelet's startup probe would end it a little later, saying only
that a probe failed.

Time on hold does not count: while a peer of the group is parked, this pod's engine waits for it
through no fault of its own, and ending the pod would recreate the group into the same wait."""

from __future__ import annotations

import asyncio

from healthchecks.state import PodHealth
from healthchecks.watcher import Watcher
from launcher.contract.exits import STARTUP_DEADLINE
from launcher.contract.stop import Verdict

HOLD_TICK = 1.0  # seconds between two looks at whether start-up is on hold


def late(seconds: float, where: str) -> str:
    return STARTUP_DEADLINE.says(seconds=seconds, where=where)


class StartupDeadline(Watcher):
    name = "startup-deadline"

    def __init__(self, health: PodHealth, seconds: float, tick: float = HOLD_TICK) -> None:
        self.health, self.seconds, self.tick = health, seconds, tick

    async def run(self) -> Verdict | None:
        health = self.health
        while health.started_at is None:
            before = health.clock()
            if before >= health.startup_due():
                return Verdict(late(self.seconds, health.stuck_in()), STARTUP_DEADLINE.number)
            await asyncio.sleep(min(self.tick, health.startup_due() - before))
            if health.held_by() is not None:
                health.hold(health.clock() - before)
        return None
