"""The start-up deadline (LLMD_STARTUP_SECONDS): start-up not ended that long after launch ends the
pod, naming where it is stuck. The kubelet's startup probe would end it a little later, saying only
that a probe failed."""

from __future__ import annotations

import asyncio

from healthchecks.state import PodHealth
from healthchecks.watcher import Watcher
from launcher.contract.exits import STARTUP_DEADLINE
from launcher.contract.stop import Verdict


def late(seconds: float, where: str) -> str:
    return STARTUP_DEADLINE.says(seconds=seconds, where=where)


class StartupDeadline(Watcher):
    name = "startup-deadline"

    def __init__(self, health: PodHealth, seconds: float) -> None:
        self.health, self.seconds = health, seconds

    async def run(self) -> Verdict | None:
        health = self.health
        await asyncio.sleep(max(0.0, health.launched_at + self.seconds - health.clock()))
        if health.started_at is None:
            return Verdict(late(self.seconds, health.stuck_in()), STARTUP_DEADLINE.number)
        return None
