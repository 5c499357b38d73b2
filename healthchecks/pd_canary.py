"""The P/D canary (the plan's Probes.pd_canary, LLMD_PD_CANARY_PREFILLER): the forward watch's canary
POSTed through this pod's disagg sidecar with the `x-prefiller-host-port` header, so the sidecar runs
its prompt on that prefill endpoint and its decode leg here with the KV the connector moved: the
two-step path proved end to end. Sent every stall_seconds once start-up has ended; counted by outcome
(llmd_launcher_pd_canary_total), shown in /livez and logged when its outcome changes. An Observer:
never a verdict, since a failure is as often the prefill peer's as this pod's.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import Metric

from healthchecks.canary import OUTCOMES, Outcome, send_canary
from healthchecks.metrics import PD_CANARIES
from healthchecks.watcher import Observer
from launcher.contract.log import Log
from launcher.contract.plan import PdCanary, ProgressWatch

if TYPE_CHECKING:
    from aiohttp import ClientSession

# The router's choice of prefill pod, which the disagg sidecar reads (llm-d/llm-d-router
# pkg/sidecar/proxy/proxy.go requestHeaderPrefillHostPort).
PREFILLER_HEADER = "x-prefiller-host-port"


class PdCanaryWatcher(Observer):
    name = "pd_canary"

    def __init__(
        self,
        pd: PdCanary,
        watch: ProgressWatch,
        started: Callable[[], bool],
        interval: float,
        log: Log,
        api_key: str | None = None,
        pool: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """watch: the forward watch whose canary, window (stall_seconds) and deadline it uses;
        started(): whether start-up has ended; api_key: the engine's (healthchecks/canary.py)."""
        self.pd, self.watch, self.started, self.interval = pd, watch, started, interval
        self.log, self.pool, self.clock, self._api_key = log, pool, clock, api_key
        self.latest = "none sent"  # the latest outcome, for /livez
        self.counts: Counter[str] = Counter()  # by outcome: ok, failed, refused
        self._outcome: Outcome | None = None  # logged when it changes

    async def run(self) -> None:
        import aiohttp

        base = f"{'https' if self.pd.tls else 'http'}://127.0.0.1:{self.pd.port}"
        while not self.started():
            await asyncio.sleep(self.interval)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            while True:
                # One window after start-up first: the sidecar, started beside the engine, may still be
                # coming up (a TLS one makes its certificate) when the engine answers.
                await asyncio.sleep(self.watch.stall_seconds)
                if self.started():
                    await self.send(session, base)

    async def send(self, session: ClientSession, base: str) -> None:
        answer = await send_canary(
            session,
            base,
            self.watch,
            self._api_key,
            {PREFILLER_HEADER: self.pd.prefiller},
            self.pd.tls,
            self.clock,
        )
        if answer.outcome != self._outcome:
            log = self.log.info if answer.outcome == "ok" else self.log.warning
            log(
                f"P/D canary {answer.detail} (never a verdict)",
                prefiller=self.pd.prefiller,
                answer=answer.excerpt,
            )
        self.latest, self._outcome = answer.detail, answer.outcome
        self.counts[answer.outcome] += 1

    def live_facts(self) -> dict[str, Any]:
        """Its latest outcome and counts, so a broken two-step path shows on a pod that stays live."""
        return {
            "pd_canary": {
                "prefiller": self.pd.prefiller,
                "latest": self.latest,
                "counts": {o: self.counts[o] for o in OUTCOMES},
                "verdict": "never: a failure is as often the prefill peer's",
            }
        }

    def metrics(self) -> Iterator[Metric]:
        family = PD_CANARIES.family()
        for outcome in OUTCOMES:
            family.add_metric([self.pool, self.watch.role, outcome], self.counts[outcome])
        yield family
