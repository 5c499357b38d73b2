"""Parking: in an LWS group, a mistake a restart cannot fix keeps the pod alive instead of ending it.

Under LWS's RecreateGroupOnPodRestart any exit recreates the whole group (kubernetes-sigs/lws
`pkg/controllers/pod_controller.go` `handleRestartPolicy`): the new pods fail the same way a minute
later, with no kubelet back-off (they are new pods) and the reason deleted with the old ones. So bad
input or a failed preflight parks the pod instead: nothing is spawned; /livez answers 200 (the
kubelet must not restart it), /startupz and /readyz 503 with the reason; the reason is logged again
every REMIND_EVERY seconds; and the inputs are read again and preflight re-run with back-off, so a
fixed ConfigMap (mounted files are updated in place), a finished checkpoint copy or a freed port
starts the engine in the same pod. The container's env cannot change without a new pod: a problem
in it heals only by a rollout, and the pod says so.

Parking ends with exit 2 after LLMD_PARK_SECONDS, or at once on SIGTERM, with the reason in the
termination message. Outside a group (no LWS env) nothing parks: exit 2 at once, as before.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from healthchecks.state import Parked, PodHealth
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.exits import BAD_INPUT, EVENT_REASONS, signal_name
from launcher.contract.log import Log
from launcher.contract.lws import LEADER_ADDRESS
from launcher.supervise.outcome import Outcome
from launcher.supervise.supervisor import SignalReceived
from roles.engines import ENGINE_ENV_PREFIXES

if TYPE_CHECKING:
    from launcher.supervise.supervisor import Event

FIRST_RECHECK = 1.0  # seconds before the first re-check; doubled after each, up to MAX_RECHECK
MAX_RECHECK = 30.0
REMIND_EVERY = 60.0  # seconds between two log lines of the same reason
# Which problems heal in place, by the setting a Problem names; one declaration per class.
# What the container was started with changes only with a new pod (a rollout): its env, and what
# preflight finds of its capabilities, rlimits, memory limit, devices, image and PID namespace.
_ENV_PREFIXES = ("LLMD", "LWS", "POD", "TPU", "NODE", *ENGINE_ENV_PREFIXES)
_ENV_NAME = re.compile(rf"({'|'.join(_ENV_PREFIXES)})_[A-Z0-9_]+")
ENGINE_CONFIGURATION = "engine configuration"  # the setting of a refusal by the engine itself (run.py)
_STARTED_WITH = (
    ENGINE_CONFIGURATION,  # the engine refused its flags: a rollout with the fixed recipe replaces the pod
    "CAP_IPC_LOCK",  # the effective set is fixed at exec (kubernetes/kubernetes#56374)
    "RLIMIT_MEMLOCK",  # set by the runtime at the container's start
    "container memory limit",  # an in-place resize is possible, but not what fixes a plan's need
    "rdma",  # devices are given to a pod when it is created
    "accelerators",  # likewise its GPUs and TPU chips
    "process ",  # a binary missing from the image
    "engine interpreter",  # the image's engine venv
    "flag catalogue",  # the engine version in the image
    "/proc",  # the pod's PID namespace (shareProcessNamespace)
)
# These are env, but what they point at can change in place: the recipe file's content, the leader's
# DNS record, the process holding the probe port. Everything else (the recipe's keys, the checkpoint,
# a port, the drafter in the hub cache) is a file or a process of the node: it can heal in place.
_NOT_ENV = ("LLMD_RECIPE_FILE", LEADER_ADDRESS, "LLMD_PROBE_PORT")


def heals_in_place(problem: Problem) -> bool:
    """Whether fixing it needs no new pod: a recipe file, the checkpoint, a port, the leader's DNS
    record can change under a running pod; what the container started with (its env, capabilities,
    rlimits, devices, image) cannot."""
    if problem.setting.startswith(_STARTED_WITH):
        return False
    head = problem.setting.split(" ", 1)[0]
    return head in _NOT_ENV or not _ENV_NAME.fullmatch(head)


class Parking:
    """One pod's parking: parks it on each failed attempt, says when to try again, and ends it."""

    def __init__(
        self,
        health: PodHealth,
        log: Log,
        bound: float,
        clock: Callable[[], float] = time.monotonic,
        scrub: Callable[[str], str] = str,
        record: Callable[[str, str], bool] | None = None,
    ) -> None:
        """scrub: the pod's secret values, hidden before a long problem is cut (Problem.shown).
        record(reason, message): records the reason as a Kubernetes Event, each once (bounded,
        blocking: run in a thread), so it outlives the group (launcher/supervise/kube_event.py)."""
        self.health, self.log, self.bound, self.clock, self.scrub = health, log, bound, clock, scrub
        self.record = record
        self.attempts = 0
        self.began: float | None = None  # when it first parked
        self.logged: tuple[str, float] | None = None  # the reason last logged, and when
        health.hold_limit = None if math.isinf(bound) else bound

    def park(self, error: ConfigError) -> None:
        """Park (or stay parked) on this attempt's problems; log them when new, or again when due."""
        now = self.clock()
        shown = [p.shown(self.scrub) for p in error.problems]  # the fix of each stays in sight
        reason = "; ".join(shown)
        heals = "in place" if all(heals_in_place(p) for p in error.problems) else "by a rollout"
        parked = self.health.parked
        if self.began is None:
            self.began = now
        self.health.park(
            Parked(reason, tuple(p.setting for p in error.problems), heals, parked.since if parked else now)
        )
        self.attempts += 1
        if self.record is not None:  # a reason already recorded is not posted again
            asyncio.get_running_loop().run_in_executor(
                None, self.record, EVENT_REASONS[BAD_INPUT.name], reason
            )
        if self.logged is None or self.logged[0] != reason or now - self.logged[1] >= REMIND_EVERY:
            self.logged = (reason, now)
            self.log.error(
                "parked: a restart would recreate the LWS group into the same mistake",
                problems=shown,
                heals=heals,
                parked_s=round(now - self.began, 1),
                limit_s="forever" if math.isinf(self.bound) else self.bound,
                next_check_s=self.next_check(),
            )

    def next_check(self) -> float:
        return float(min(MAX_RECHECK, FIRST_RECHECK * 2 ** max(0, self.attempts - 1)))

    def out_of_time(self) -> bool:
        return self.began is not None and self.clock() - self.began >= self.bound

    async def pause(self, events: asyncio.Queue[Event]) -> Outcome | None:
        """Until the next check (None), or the outcome when parking ends: its bound, or a stop signal."""
        if self.out_of_time():
            return self.end(f"LLMD_PARK_SECONDS={self.bound:g} ran out")
        wait = min(self.next_check(), self.bound - (self.clock() - (self.began or self.clock())))
        try:
            event = await asyncio.wait_for(events.get(), timeout=max(0.0, wait))
        except asyncio.TimeoutError:
            return None
        if isinstance(event, SignalReceived):
            return self.end(f"stopped by {signal_name(event.signum)}")
        return None

    def resume(self) -> None:
        """The inputs read: try preflight (parked time so far does not count against start-up)."""
        self.health.unpark()

    def healed(self) -> None:
        if self.began is not None:
            parked = round(self.clock() - self.began, 1)
            self.log.info(
                "no longer parked: the checks pass; starting", parked_s=parked, checks=self.attempts
            )

    def end(self, how: str) -> Outcome:
        """Exit 2, the problems first (the termination message keeps its head); the Event recorded
        when it parked is the same reason, so it is not recorded again."""
        parked = self.health.parked
        reason, heals = (parked.reason, parked.heals) if parked is not None else ("parked", "in place")
        seconds = self.clock() - (self.began or self.clock())
        self.health.unpark()
        return Outcome(
            BAD_INPUT.number, reason, detail=f"parked {seconds:.0f} s in an LWS group, heals {heals}; {how}"
        )
