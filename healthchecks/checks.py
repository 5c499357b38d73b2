"""The background checks: each runs on its own cadence with a timeout and writes its latest result
into PodHealth, so a probe never waits on a slow engine. Transitions are logged once each."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from healthchecks.http import NoAnswer, http_get, tcp_connect
from healthchecks.state import CheckResult, PodHealth
from healthchecks.watcher import Watcher
from launcher.contract.log import Log
from launcher.contract.plan import Check, HttpCheck, TcpCheck

if TYPE_CHECKING:
    from aiohttp import ClientSession

STARTUP_INTERVAL = 1.0  # seconds: while loading, notice the first answer soon


class CheckRunner(Watcher):
    """Runs the plan's checks; its results are PodHealth's (probes, check metrics), so it adds none."""

    name = "checks"

    def __init__(self, health: PodHealth, interval: float, timeout: float, log: Log) -> None:
        self.health, self.interval, self.timeout, self.log = health, interval, timeout, log
        self._last_ok: dict[str, bool] = {}

    async def run(self) -> None:
        """Until cancelled."""
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True)  # a fresh connection, as the kubelet makes
        async with aiohttp.ClientSession(connector=connector) as session:
            # Other requests (KV events flowing) are answered by their watcher when a probe asks.
            fetched = [
                c
                for c in self.health.checks
                if c.request is None or isinstance(c.request, (HttpCheck, TcpCheck))
            ]
            await asyncio.gather(*(self._loop(session, check) for check in fetched))

    async def _loop(self, session: ClientSession, check: Check) -> None:
        while True:
            await self.run_once(session, check)
            started = self.health.started_at is not None
            await asyncio.sleep(self.interval if started else min(self.interval, STARTUP_INTERVAL))

    async def run_once(self, session: ClientSession, check: Check) -> CheckResult:
        began = time.monotonic()
        state = self.health.process(check.process)
        pid = state.pid if state is not None and state.running else None
        if pid is None:
            ok, detail = False, f"{check.process} is not running"
        elif isinstance(check.request, (HttpCheck, TcpCheck)):
            ok, detail = await self._request(session, check.request)
        else:  # the process running is the whole check
            ok, detail = True, f"{check.process} is running (pid {pid})"
        result = CheckResult(ok, detail, self.health.clock(), time.monotonic() - began, pid)
        self.health.record(check, result)
        if self._last_ok.get(check.name) != ok and pid is not None:
            self._last_ok[check.name] = ok
            (self.log.info if ok else self.log.warning)(
                "check passes" if ok else "check fails", check=check.name, detail=detail
            )
        return result

    async def _request(self, session: ClientSession, request: HttpCheck | TcpCheck) -> tuple[bool, str]:
        if isinstance(request, TcpCheck):
            return await tcp_connect(request.host, request.port, self.timeout)
        what = f"GET :{request.port}{request.path}"
        try:
            status, _ = await http_get(
                session, f"http://127.0.0.1:{request.port}{request.path}", self.timeout
            )
        except NoAnswer as exc:
            return False, f"{what}: {exc}"
        return status == 200, f"{what}: {status}"
