"""The probe server (aiohttp, in the launcher's event loop): /livez /readyz /startupz /metrics.

Every answer is computed from PodHealth in memory, so a probe costs microseconds of launcher time and
never waits on the engine. It starts before preflight (a pod waiting for its leader is alive, and its
/startupz says what it waits for) and stops only after the supervisor has finished.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from healthchecks.http import IDENTITY_HEADER
from healthchecks.kvevents.watcher import KvEventWatcher
from healthchecks.metrics import build_registry
from healthchecks.state import Answer, PodHealth
from launcher.contract.errors import ConfigError

JSON = "application/json"


@web.middleware
async def _http_1_only(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """An HTTP/0.9 request has no status line to read a 200 from: no probe client sends one."""
    if request.version < (1, 0):
        return web.Response(status=505, text="HTTP/1.0 or later\n")
    return await handler(request)


class _OneLine(logging.Handler):
    """aiohttp logs a malformed request with its traceback; the launcher's logs keep one line per
    event (one JSON object in JSON mode), so the error goes through the launcher's logger, condensed."""

    def emit(self, record: logging.LogRecord) -> None:
        import structlog  # configured (and first imported) by launcher/supervise/logs.py

        error = record.exc_info[1] if record.exc_info else None
        detail = " ".join(str(error).split())[:200] if error is not None else ""
        structlog.get_logger("llm-d-launcher").warning(
            "probe server: bad request",
            message=record.getMessage()[:200],
            error=f"{type(error).__name__}: {detail}" if error is not None else None,
        )


_REQUEST_ERRORS = logging.getLogger("llm-d-launcher.probe-server")
_REQUEST_ERRORS.addHandler(_OneLine())
_REQUEST_ERRORS.propagate = False


def scrubbed(value: Any, scrub: Callable[[str], str]) -> Any:
    """A JSON-able answer with every string (keys too) passed through the scrubber."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrubbed(k, scrub): scrubbed(v, scrub) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrubbed(v, scrub) for v in value]
    return value


class ProbeServer:
    """`holder_of(port)` names the process that holds a port, for the error when ours is taken: the
    runtime's process-table scan (launcher/supervise/preflight.py), handed in so the probes need none.
    `scrub` hides the pod's secret values in every answer, as in the logs and the termination message:
    the probe port listens on every interface."""

    def __init__(
        self,
        health: PodHealth,
        host: str,
        port: int,
        holder_of: Callable[[int], str],
        scrub: Callable[[str], str],
    ) -> None:
        self.health, self.host, self.port, self.holder_of = health, host, port, holder_of
        self.scrub = scrub
        self.registry, self._latency = build_registry(health)
        app = web.Application(middlewares=[_http_1_only])
        app.router.add_get("/livez", self._probe("livez", health.liveness))
        app.router.add_get("/readyz", self._probe("readyz", health.readiness))
        app.router.add_get("/startupz", self._probe("startupz", health.startup))
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/kvevents", self._kv_events)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, logger=_REQUEST_ERRORS)

    async def start(self) -> None:
        await self._runner.setup()
        # A deep accept queue: the kubelet and scrapers may connect at once; a full queue drops SYNs
        # and costs the client a 1 s retransmit.
        site = web.TCPSite(self._runner, self.host or None, self.port, reuse_address=True, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            where = f"{self.host or '*'}:{self.port}"
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            if exc.errno == errno.EADDRINUSE:
                reason += f", held by {self.holder_of(self.port)}"
            raise ConfigError.one(
                "LLMD_PROBE_PORT",
                f"the probe server cannot listen on {where}: {reason}",
                "set LLMD_PROBE_PORT to a port no process of the pod uses (and point the probes at it)",
            ) from None

    async def stop(self) -> None:
        await self._runner.cleanup()

    def _probe(
        self, endpoint: str, answer: Callable[[], Answer]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        latency = self._latency.labels(endpoint)

        async def handle(_: web.Request) -> web.Response:
            began = time.perf_counter()
            ok, body = answer()
            response = web.Response(
                body=json.dumps(scrubbed(body, self.scrub), separators=(",", ":")).encode(),
                status=200 if ok else 503,
                content_type=JSON,
                headers={IDENTITY_HEADER: self.health.identity} if self.health.identity else None,
            )
            latency.observe(time.perf_counter() - began)
            return response

        return handle

    async def _kv_events(self, _: web.Request) -> web.Response:
        """What the KV-event watcher saw, per rank, and the latest BlockStored events (for people)."""
        watcher = self.health.watcher(KvEventWatcher.name)
        if watcher is None:
            return web.json_response({"watching": False}, status=404)
        return web.json_response(scrubbed({"watching": True, **watcher.details()}, self.scrub))

    async def _metrics(self, _: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        began = time.perf_counter()
        body: Any = self.scrub(generate_latest(self.registry).decode()).encode()
        self._latency.labels("metrics").observe(time.perf_counter() - began)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
