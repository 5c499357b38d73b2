"""The probe server: /livez /readyz /startupz /metrics /kvevents on the probe port.

Every answer is computed from PodHealth in memory, so a probe never waits on the engine. The probe
port's sockets are bound here, and served by the probe process (healthchecks/probe_process.py): it
answers the three probes from the answers this launcher publishes (healthchecks/probe_publisher.py),
so a probe does not wait for the launcher's loop either, and relays every other request to the aiohttp
application below, served on an abstract Unix socket in the launcher's loop. It starts before
preflight (a pod waiting for its leader is alive, and its /startupz says what it waits for) and stops
only after the supervisor has finished.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from healthchecks.http import IDENTITY_HEADER
from healthchecks.kvevents.watcher import KvEventWatcher
from healthchecks.metrics import build_registry
from healthchecks.probe_process import SILENT_SECONDS
from healthchecks.probe_publisher import ProbePublisher
from healthchecks.state import Answer, PodHealth
from launcher.contract.endpoints import PROBE_ENDPOINTS
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
    the probe port listens on every interface. `silent_after`: the probe process's staleness rule."""

    def __init__(
        self,
        health: PodHealth,
        host: str,
        port: int,
        holder_of: Callable[[int], str],
        scrub: Callable[[str], str],
        silent_after: float = SILENT_SECONDS,
    ) -> None:
        self.health, self.host, self.port, self.holder_of = health, host, port, holder_of
        self.scrub, self.silent_after = scrub, silent_after
        self.registry, self._latency = build_registry(health)
        self.answers = {e.path: getattr(health, e.answer) for e in PROBE_ENDPOINTS.values()}
        app = web.Application(middlewares=[_http_1_only])
        for path, answer in self.answers.items():
            app.router.add_get(path, self._probe(path[1:], answer))
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/kvevents", self._kv_events)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, logger=_REQUEST_ERRORS)
        self._listeners: list[socket.socket] = []
        self.publisher: ProbePublisher | None = None

    @property
    def spared(self) -> dict[int, subprocess.Popen[bytes]]:
        """The probe process by pid: the supervisor neither signals it nor reports its end (it serves
        the probes while the pod stops, and ends with this server; the publisher reports it)."""
        return self.publisher.spared if self.publisher is not None else {}

    def publish_now(self) -> None:
        """Hand the probe process the answers now (a phase or a check changed, a stop began): it looks
        by itself only every PUBLISH_INTERVAL."""
        if self.publisher is not None:
            self.publisher.publish()

    async def start(self) -> None:
        try:
            self._listeners = listen(self.host, self.port)
        except OSError as exc:
            where = f"{self.host or '*'}:{self.port}"
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            if exc.errno == errno.EADDRINUSE:
                reason += f", held by {self.holder_of(self.port)}"
            raise ConfigError.one(
                "LLMD_PROBE_PORT",
                f"the probe server cannot listen on {where}: {reason}",
                "set LLMD_PROBE_PORT to a port no process of the pod uses (and point the probes at it)",
            ) from None
        await self._runner.setup()
        backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        backend.bind("")  # Linux autobind: an abstract address of its own, nothing to clean up
        await web.SockSite(self._runner, backend, backlog=1024).start()
        from aiohttp.http import SERVER_SOFTWARE

        self.publisher = ProbePublisher(
            self.health,
            self.answers,
            lambda body: scrubbed(body, self.scrub),
            self._listeners,
            backend.getsockname(),
            lambda endpoint, seconds: self._latency.labels(endpoint).observe(seconds),
            SERVER_SOFTWARE,
            self.silent_after,
            _warn,
        )
        self.publisher.start()
        self.health.changed = self.publish_now

    async def stop(self) -> None:
        if self.publisher is not None:
            self.publisher.stop()
        for listener in self._listeners:
            listener.close()
        await self._runner.cleanup()

    def _probe(
        self, endpoint: str, answer: Callable[[], Answer]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        """The answer to a probe the probe process relays (a HEAD, a query string)."""
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

        if self.publisher is not None:
            self.publisher.take_durations()  # the probes answered before this scrape count in it
        began = time.perf_counter()
        body: Any = self.scrub(generate_latest(self.registry).decode()).encode()
        self._latency.labels("metrics").observe(time.perf_counter() - began)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def listen(host: str, port: int) -> list[socket.socket]:
    """The probe port's listening sockets, as asyncio's create_server binds them (every address of
    `host`; "" is every interface, IPv4 and IPv6), with a deep accept queue: the kubelet and scrapers
    may connect at once, and a full queue drops SYNs and costs the client a 1 s retransmit."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this kernel lacks (IPv6 off)
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(1024)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _warn(event: str) -> None:
    import structlog

    structlog.get_logger("llm-d-launcher").warning(event)
