"""The KV store's master, watched while the pod runs: has it restarted and lost what it knew?

Mooncake's master exports no start time or uptime (0.3.13.post1: /metrics, /health, /role), and its
embedded HTTP metadata server keeps its keys in memory only. So the watcher writes a marker key of its
own there once and reads it back every interval: a 404 "metadata not found" for a marker that was
there means the master restarted and forgot every registration, this pod's segment's transfer
metadata included (kvcache-ai/Mooncake#2246). What the pod then does is the family's decision
(`StoreMaster.reregister`): a donor ends (its container restarts and registers again), an engine
counts it, logs it and writes a new marker.

A master whose metadata server is not HTTP (P2PHANDSHAKE, etcd) has no such marker: not watched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from prometheus_client.core import Metric

from healthchecks.http import NoAnswer, http_reply
from healthchecks.metrics import STORE_MASTER_RESTARTS, STORE_MASTER_UP
from healthchecks.watcher import Watcher
from launcher.contract.exits import STORE_MASTER_RESTARTED
from launcher.contract.log import Log
from launcher.contract.plan import StoreMaster
from launcher.contract.stop import Verdict

if TYPE_CHECKING:
    from aiohttp import ClientSession

MARKER_PREFIX = "llm-d-launcher/marker/"


class StoreMasterWatcher(Watcher):
    name = "store_master"

    def __init__(
        self,
        master: StoreMaster,
        marker: str,
        interval: float,
        timeout: float,
        log: Log,
    ) -> None:
        assert master.metadata_server is not None, "only an HTTP metadata server holds a marker"
        self.master, self.interval, self.timeout, self.log = master, interval, timeout, log
        self.url = f"{master.metadata_server}?key={quote(MARKER_PREFIX + marker, safe='')}"
        self.marker = marker
        self.marked = False  # the marker is written and was read back since
        self.up = False  # the metadata server's latest answer was HTTP
        self.restarts = 0
        self.detail = "not asked yet"
        self.verdict: str | None = None

    async def run(self) -> Verdict | None:
        """Until cancelled, or (a family that must register again) until the master restarted."""
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True, use_dns_cache=False)  # a new master: new IP
        async with aiohttp.ClientSession(connector=connector) as session:
            while True:
                if await self.look(session) and self.master.reregister:
                    self.verdict = STORE_MASTER_RESTARTED.says(master=self.master.name, rpc=self.master.rpc)
                    self.log.error("store master restarted", reason=self.verdict)
                    return Verdict(self.verdict, STORE_MASTER_RESTARTED.number)
                await asyncio.sleep(self.interval)

    async def look(self, session: ClientSession) -> bool:
        """One round: write the marker if it is not there yet, else read it back. True: it is gone."""
        try:
            if not self.marked:
                status = await self._request(session, "PUT")
                self.marked = status == 200
                self._answered(f"marker written: {status}")
                return False
            status = await self._request(session, "GET")
        except NoAnswer as exc:
            if self.up:
                self.log.warning("store master unreachable", master=self.master.rpc, detail=str(exc))
            self.up, self.detail = False, str(exc)
            return False
        self._answered(f"marker read: {status}")
        if status != 404:
            return False
        self.restarts += 1
        self.marked = False  # written again next round, to see the next restart
        self.log.warning(
            "store master restarted: its metadata server lost this pod's registration",
            master=self.master.rpc,
            restarts=self.restarts,
            action="exit to register again" if self.master.reregister else "reported only",
        )
        return True

    def _answered(self, detail: str) -> None:
        if not self.up:
            self.log.info("store master answers", master=self.master.rpc, detail=detail)
        self.up, self.detail = True, detail

    async def _request(self, session: ClientSession, method: str) -> int:
        data = self.marker.encode() if method == "PUT" else None
        reply = await http_reply(session, self.url, self.timeout, method=method, data=data)
        return reply.status

    # -------------------------------------------------------------- the watcher protocol
    def not_live(self) -> str | None:
        return self.verdict

    def details(self) -> dict[str, Any]:
        return {"master": self.master.rpc, "up": self.up, "restarts": self.restarts, "detail": self.detail}

    def metrics(self) -> Iterator[Metric]:
        up, restarts = STORE_MASTER_UP.family(), STORE_MASTER_RESTARTS.family()
        up.add_metric([self.master.rpc], float(self.up))
        restarts.add_metric([self.master.rpc], float(self.restarts))
        yield from (up, restarts)
