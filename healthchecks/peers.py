"""The group's other pods, watched through their launchers' /livez (roles/probes.py says which).

A peer that answered once and then fails for `peer_lost_seconds` is lost, and this pod ends too, so
LWS recreates the whole group at once. Alone, vLLM notices a dead peer only when the next request
fails, and a stopped one never; its leader answers /health 200 all along. A peer that never answered
is not judged here: it may still be starting.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.contract.exits import GROUP_BROKEN
from launcher.contract.log import Log
from launcher.contract.plan import Peer, Probes


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


class PeerWatcher:
    def __init__(
        self,
        probes: Probes,
        interval: float,
        timeout: float,
        on_lost: Callable[[str], None],
        log: Log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.states = [PeerState(peer) for peer in probes.peers]
        self.lost_after = probes.peer_lost_seconds
        self.interval, self.timeout, self.on_lost, self.log, self.clock = (
            interval,
            timeout,
            on_lost,
            log,
            clock,
        )

    async def run(self) -> None:
        """Until a peer is lost (then `on_lost` is called once) or the task is cancelled."""
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout)
        connector = aiohttp.TCPConnector(force_close=True, use_dns_cache=False)  # a recreated pod: new IP
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            while True:
                await asyncio.gather(*(self.check(session, state) for state in self.states))
                reason = self.lost()
                if reason is not None:
                    self.log.error("group member lost", reason=reason)
                    self.on_lost(reason)
                    return
                await asyncio.sleep(self.interval)

    async def check(self, session: Any, state: PeerState) -> None:
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

    def lost(self) -> str | None:
        """Why the group is broken, or None."""
        now = self.clock()
        for state in self.states:
            if state.failing_since is not None and now - state.failing_since >= self.lost_after:
                return GROUP_BROKEN.says(
                    peer=f"{state.peer.name} ({state.peer.host})",
                    detail=f"its launcher has not answered /livez for {now - state.failing_since:.1f} s "
                    f"({state.detail})",
                )
        return None

    async def _ask(self, session: Any, state: PeerState) -> tuple[bool, str]:
        import aiohttp

        try:
            async with session.get(state.url) as reply:
                return reply.status == 200, f"/livez {reply.status}"
        except asyncio.TimeoutError:
            return False, f"no answer within {self.timeout:g} s"
        except aiohttp.ClientConnectorError as exc:
            error = exc.os_error
            return False, os.strerror(error.errno) if error.errno else str(error)
        except aiohttp.ClientError as exc:
            return False, f"{type(exc).__name__}: {exc}"
