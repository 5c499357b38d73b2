"""The group's other pods, watched through their launchers' /livez (roles/probes.py says which).

A peer that answered once and then fails for `peer_lost_seconds` is lost, and this pod ends too, so
LWS recreates the whole group at once. Alone, vLLM notices a dead peer only when the next request
fails, and a stopped one never; its leader answers /health 200 all along. A peer that never answered
is not judged here: it may still be starting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import Metric

from healthchecks.http import NoAnswer, http_get
from healthchecks.metrics import PEER_LAST_ANSWER, PEER_LOST, PEER_UP, wall_time
from healthchecks.watcher import Watcher
from launcher.contract.exits import GROUP_BROKEN
from launcher.contract.log import Log
from launcher.contract.plan import Peer, Probes
from launcher.contract.stop import Verdict

if TYPE_CHECKING:
    from aiohttp import ClientSession


@dataclass
class PeerState:
    peer: Peer
    answered_at: float | None = None  # the last 200 from its /livez
    failing_since: float | None = None  # the first failure after an answer
    detail: str = "not asked yet"

    @property
    def url(self) -> str:
        host = f"[{self.peer.host}]" if ":" in self.peer.host else self.peer.host
        return f"http://{host}:{self.peer.port}/livez"

    @property
    def up(self) -> bool:
        """Its latest /livez answered 200."""
        return self.answered_at is not None and self.failing_since is None

    def as_dict(self, now: float) -> dict[str, Any]:
        since = None if self.answered_at is None else round(now - self.answered_at, 1)
        return {"host": self.peer.host, "up": self.up, "seconds_since_answer": since, "detail": self.detail}


class PeerWatcher(Watcher):
    name = "peers"

    def __init__(
        self,
        probes: Probes,
        interval: float,
        timeout: float,
        log: Log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.states = [PeerState(peer) for peer in probes.peers]
        self.lost_after = probes.peer_lost_seconds
        self.interval, self.timeout, self.log, self.clock = interval, timeout, log, clock
        self.lost_peer: PeerState | None = None  # the first one found lost
        self.verdict: str | None = None  # ... and why

    async def run(self) -> Verdict:
        """Until a peer is lost (the verdict) or the task is cancelled."""
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True, use_dns_cache=False)  # a recreated pod: new IP
        async with aiohttp.ClientSession(connector=connector) as session:
            while True:
                await asyncio.gather(*(self.check(session, state) for state in self.states))
                self.lost_peer = self.lost()
                if self.lost_peer is not None:
                    self.verdict = self.why_lost(self.lost_peer)
                    self.log.error("group member lost", reason=self.verdict)
                    return Verdict(self.verdict, GROUP_BROKEN.number)
                await asyncio.sleep(self.interval)

    async def check(self, session: ClientSession, state: PeerState) -> None:
        ok, detail = await self._ask(session, state)
        now = self.clock()
        state.detail = detail
        if ok:
            if state.answered_at is None or state.failing_since is not None:
                self.log.info("group member answers", peer=state.peer.name, host=state.peer.host)
            state.answered_at, state.failing_since = now, None
        elif state.answered_at is not None and state.failing_since is None:
            state.failing_since = now
            self.log.warning("group member fails", peer=state.peer.name, host=state.peer.host, detail=detail)

    def lost(self) -> PeerState | None:
        """The first peer that failed for `lost_after` after it had answered, or None."""
        now = self.clock()
        return next(
            (
                s
                for s in self.states
                if s.failing_since is not None and now - s.failing_since >= self.lost_after
            ),
            None,
        )

    def why_lost(self, state: PeerState) -> str:
        assert state.failing_since is not None
        return GROUP_BROKEN.says(
            peer=f"{state.peer.name} ({state.peer.host})",
            detail=f"its launcher has not answered /livez for {self.clock() - state.failing_since:.1f} s "
            f"({state.detail})",
        )

    async def _ask(self, session: ClientSession, state: PeerState) -> tuple[bool, str]:
        try:
            status, _ = await http_get(session, state.url, self.timeout)
        except NoAnswer as exc:
            return False, str(exc)
        return status == 200, f"/livez {status}"

    # -------------------------------------------------------------- the watcher protocol
    def not_live(self) -> str | None:
        return self.verdict

    def details(self) -> dict[str, Any]:
        now = self.clock()
        return {s.peer.name: s.as_dict(now) for s in self.states}

    def metrics(self) -> Iterator[Metric]:
        up, answered, lost = PEER_UP.family(), PEER_LAST_ANSWER.family(), PEER_LOST.family()
        now = self.clock()
        for state in self.states:
            name = [state.peer.name]
            up.add_metric(name, float(state.up))
            if state.answered_at is not None:
                answered.add_metric(name, wall_time(state.answered_at, now))
            lost.add_metric(name, float(state is self.lost_peer))
        yield from (up, answered, lost)
