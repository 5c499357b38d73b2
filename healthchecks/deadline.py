"""The start-up deadline (LLMD_STARTUP_SECONDS): start-up not ended that long after launch ends the
pod, naming where it is stuck. The kubelet's startup probe would end it a little later, saying only
that a probe failed.

Time on hold does not count: while a peer of the group is parked, this pod's engine waits for it
through no fault of its own, and ending the pod would recreate the group into the same wait. For the
same reason a pod of an LWS group whose checkpoint is still being copied (healthchecks/hydration.py)
parks while the copy goes on, its engine running, up to LLMD_PARK_SECONDS: its peers hold their
deadlines too."""

from __future__ import annotations

import asyncio

from healthchecks.hydration import Hydration
from healthchecks.state import Parked, PodHealth
from healthchecks.watcher import Watcher
from launcher.contract.exits import STARTUP_DEADLINE
from launcher.contract.log import Log
from launcher.contract.phases import STARTING
from launcher.contract.stop import Verdict

HOLD_TICK = 1.0  # seconds between two looks at whether start-up is on hold


def late(seconds: float, where: str) -> str:
    return STARTUP_DEADLINE.says(seconds=seconds, where=where)


class StartupDeadline(Watcher):
    name = "startup-deadline"

    def __init__(
        self,
        health: PodHealth,
        seconds: float,
        tick: float = HOLD_TICK,
        hydration: Hydration | None = None,
        log: Log | None = None,
    ) -> None:
        """`hydration`: in an LWS group, the model directory to watch for a copy still under way."""
        self.health, self.seconds, self.tick, self.hydration, self.log = health, seconds, tick, hydration, log
        self.resume = STARTING  # the phase a copy's parking interrupted

    async def run(self) -> Verdict | None:
        health = self.health
        while health.started_at is None:
            before = health.clock()
            copying = await self._copying(before)
            if copying is None and before >= health.startup_due():
                return Verdict(late(self.seconds, health.stuck_in()), STARTUP_DEADLINE.number)
            await asyncio.sleep(
                self.tick if copying is not None else min(self.tick, health.startup_due() - before)
            )
            if copying is not None:
                copying.parked_for += health.clock() - before
            elif health.held_by() is not None:  # a parked peer; this pod's own parking counts on unpark
                health.hold(health.clock() - before)
        if health.parked is not None:
            health.unpark()
        return None

    async def _copying(self, now: float) -> Hydration | None:
        """The copy this pod is parked for (parked now, or still) while the checkpoint is being copied
        and parking's bound lasts; None: the deadline counts."""
        hydration, health = self.hydration, self.health
        if hydration is None:
            return None
        why = await asyncio.to_thread(hydration.copying, now)
        if why is not None and hydration.parked_for < hydration.bound:
            if health.parked is None:
                self.resume = health.phase
                self._say("parked: start-up waits for the checkpoint's copy", reason=why)
            since = health.parked.since if health.parked is not None else now
            health.park(Parked(why, ("model.path",), "in place", since))  # the latest file and age
            return hydration
        if health.parked is not None:
            health.unpark(resume=self.resume)
            done = "no file changed" if why is None else "LLMD_PARK_SECONDS ran out"
            parked_s = round(hydration.parked_for, 1)
            self._say(f"no longer parked: {done}; the start-up deadline counts again", parked_s=parked_s)
        return None

    def _say(self, message: str, **fields: object) -> None:
        if self.log is not None:
            self.log.warning(message, **fields)
