"""The group's other pods, watched through their launchers' /livez (roles/probes.py says which).

A peer that answered once and then fails for `peer_lost_seconds` is lost, and this pod ends too, so
LWS recreates the whole group at once. Alone, vLLM notices a dead peer only when the next request
fails, and a stopped one never; its leader answers /health 200 all along. A peer that never answered
is not judged here: it may still be starting.

Only a launcher's own answer counts: a redirect is not one (it is never followed), and an answer from
another launcher than the one that answered before (its identity header changed: the pod was
replaced within `peer_lost_seconds`) is a loss at once. A parked peer (launcher/parking.py) answers
200 and is alive; while it is parked, this pod's start-up deadline is on hold.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import Metric

from healthchecks.http import BODY_BYTES, IDENTITY_HEADER, NoAnswer, http_reply
from healthchecks.metrics import PEER_LAST_ANSWER, PEER_LOST, PEER_PARKED, PEER_UP, wall_time
from healthchecks.watcher import Watcher
from launcher.contract.endpoints import PROBE_ENDPOINTS
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
    identity: str | None = None  # of the launcher that answered first
    replaced: str | None = None  # set once another launcher answers in its place
    parked: str | None = None  # its latest answer says it is parked, and why

    @property
    def url(self) -> str:
        host = f"[{self.peer.host}]" if ":" in self.peer.host else self.peer.host
        return f"http://{host}:{self.peer.port}{PROBE_ENDPOINTS['live'].path}"

    @property
    def up(self) -> bool:
        """Its latest /livez answered 200."""
        return self.answered_at is not None and self.failing_since is None

    def as_dict(self, now: float) -> dict[str, Any]:
        since = None if self.answered_at is None else round(now - self.answered_at, 1)
        parked = {"parked": self.parked} if self.parked is not None else {}
        return {
            "host": self.peer.host,
            "up": self.up,
            "seconds_since_answer": since,
            "detail": self.detail,
            **parked,
        }


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
        ok, detail, identity, parked = await self._ask(session, state)
        now = self.clock()
        state.detail = detail
        if ok and identity != state.identity and state.answered_at is not None:
            state.replaced = f"{state.identity or 'a launcher without identity'} -> {identity or 'none'}"
            return
        if ok and parked != state.parked:
            log = self.log.warning if parked else self.log.info
            log("group member parked" if parked else "group member no longer parked", peer=state.peer.name)
        if ok:
            state.identity, state.parked = identity, parked
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
                if s.replaced is not None
                or (s.failing_since is not None and now - s.failing_since >= self.lost_after)
            ),
            None,
        )

    def why_lost(self, state: PeerState) -> str:
        peer = f"{state.peer.name} ({state.peer.host})"
        if state.replaced is not None:
            detail = f"it was replaced: another launcher answers /livez ({state.replaced})"
            return GROUP_BROKEN.says(peer=peer, detail=detail)
        assert state.failing_since is not None
        return GROUP_BROKEN.says(
            peer=peer,
            detail=f"its launcher has not answered /livez for {self.clock() - state.failing_since:.1f} s "
            f"({state.detail})",
        )

    async def _ask(
        self, session: ClientSession, state: PeerState
    ) -> tuple[bool, str, str | None, str | None]:
        """(answered 200, why not, the answering launcher's identity, why it is parked)."""
        try:
            reply = await http_reply(
                session, state.url, self.timeout, read=BODY_BYTES, follow_redirects=False
            )
        except NoAnswer as exc:
            return False, str(exc), None, None
        if 300 <= reply.status < 400:
            return False, f"/livez {reply.status}: a redirect is not a launcher's answer", None, None
        return (
            reply.status == 200,
            f"/livez {reply.status}",
            reply.headers.get(IDENTITY_HEADER.lower()),
            _parked(reply.body),
        )

    # -------------------------------------------------------------- the watcher protocol
    def holds_startup(self) -> str | None:
        parked = next((s for s in self.states if s.parked is not None and s.up), None)
        return None if parked is None else f"group member {parked.peer.name} is parked: {parked.parked}"

    def not_live(self) -> str | None:
        return self.verdict

    def details(self) -> dict[str, Any]:
        now = self.clock()
        return {s.peer.name: s.as_dict(now) for s in self.states}

    def metrics(self) -> Iterator[Metric]:
        up, answered, lost = PEER_UP.family(), PEER_LAST_ANSWER.family(), PEER_LOST.family()
        parked = PEER_PARKED.family()
        now = self.clock()
        for state in self.states:
            name = [state.peer.name]
            up.add_metric(name, float(state.up))
            parked.add_metric(name, float(state.parked is not None))
            if state.answered_at is not None:
                answered.add_metric(name, wall_time(state.answered_at, now))
            lost.add_metric(name, float(state is self.lost_peer))
        yield from (up, answered, lost, parked)


def _parked(body: str) -> str | None:
    """The reason a launcher's /livez body gives for being parked (healthchecks/state.py), if any."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    reason = answer.get("parked") if isinstance(answer, dict) else None
    return reason[:500] if isinstance(reason, str) else None
