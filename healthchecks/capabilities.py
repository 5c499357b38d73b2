"""The capability watcher: runs the plan's capability probes (launcher/contract/capabilities.py) once
the engine has answered, so the pod's first /readyz 200 already means they hold; then every
LLMD_CAPABILITY_SECONDS and at once after any process restart. A required capability absent holds
/readyz at 503 naming it, its probe and the answer, records an Event on the LWS and sets
llmd_launcher_capability; an expected one only sets the metric (deploy/ alerts on it). Never a
liveness verdict: a restart cannot add an endpoint the engine was not started with.

`probe_once` is also what `llm-d-launcher capabilities check` runs from outside the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from healthchecks.engine_metrics import METRICS_BYTES
from healthchecks.http import BODY_BYTES, NoAnswer, http_reply, tcp_connect
from healthchecks.metrics import CAPABILITY
from healthchecks.watcher import Watcher
from launcher.contract.capabilities import (
    CapabilitiesHeld,
    CapabilityCheck,
    CapabilityWatch,
    HttpAnswer,
    KvCapacity,
    Level,
    MetricFamily,
    Probe,
    TcpOpen,
    ZmqAnswer,
)
from launcher.contract.exits import CAPABILITY_ABSENT
from launcher.contract.log import Log
from launcher.contract.plan import Check

if TYPE_CHECKING:
    from aiohttp import ClientSession
    from prometheus_client.core import Metric

    from healthchecks.state import PodHealth

RESTART_POLL = 1.0  # seconds between two looks at the process table for a restart
END_SEQ = (2**64 - 1).to_bytes(8, "big")  # the replay endpoint's end marker (healthchecks/kvevents/wire.py)
Outcome = tuple[bool, str]


class CapabilityWatcher(Watcher):
    name = "capabilities"

    def __init__(
        self,
        watch: CapabilityWatch,
        health: PodHealth,
        timeout: float,
        log: Log,
        record_event: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.watch, self.health, self.timeout, self.log = watch, health, timeout, log
        self.record_event = record_event
        self.results: list[tuple[CapabilityCheck, Outcome]] = []  # the latest round, in plan order
        self._reported: set[int] = set()  # indexes of the absent ones already logged and recorded

    async def run(self) -> None:
        """Until cancelled; a probe's own failure is a reason, never the launcher's end."""
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # logged, never the launcher's end: the engine serves on
            self.log.error("capability watcher stopped", error=repr(exc))

    async def _run(self) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            restarted = False
            while True:
                await self._others_pass()
                pids = self._pids()
                await self.check_all(session)
                if restarted:
                    self.log.info("capabilities checked again after a process restart")
                due = time.monotonic() + self.watch.interval
                while time.monotonic() < due and self._pids() == pids:
                    await asyncio.sleep(min(RESTART_POLL, max(0.0, due - time.monotonic())))
                restarted = self._pids() != pids

    async def _others_pass(self) -> None:
        """Until the engine has answered and every other readiness check passes (a restarted sidecar
        answers its /health), so a round judges capabilities, not a process still starting."""
        others = [c for c in self.health.probes.ready if not isinstance(c.request, CapabilitiesHeld)]
        while self.health.started_at is None or not all(self.health.passing(c)[0] for c in others):
            await asyncio.sleep(0.05)

    def _pids(self) -> tuple[int | None, ...]:
        supervisor = self.health.supervisor
        return () if supervisor is None else tuple(p.pid for p in supervisor.processes)

    async def check_all(self, session: ClientSession) -> None:
        outcomes = await asyncio.gather(
            *(probe_once(session, c.probe, "127.0.0.1", self.timeout) for c in self.watch.checks)
        )
        before = self.answer_now()
        self.results = list(zip(self.watch.checks, outcomes, strict=True))
        await self._report()
        if self.answer_now() != before:
            self.health.changed()

    async def _report(self) -> None:
        absent = {i for i, (_, (ok, _)) in enumerate(self.results) if not ok}
        for i in sorted(absent - self._reported):
            check, (_, reason) = self.results[i]
            self.log.warning(
                "capability absent",
                capability=check.capability,
                level=check.level.value,
                target=check.target,
                reason=reason,
            )
            if check.level is Level.REQUIRED and self.record_event is not None:
                message = f"required capability {check.capability} absent at {check.target}: {reason}"
                await asyncio.to_thread(self.record_event, CAPABILITY_ABSENT, message)
        for i in sorted(self._reported - absent):
            check = self.results[i][0]
            self.log.info("capability present", capability=check.capability, target=check.target)
        self._reported = absent

    def answer_now(self) -> Outcome:
        if not self.results:
            return False, "not checked yet (the engine has not answered)"
        missing = [
            f"{c.capability}: {why}" for c, (ok, why) in self.results if not ok and c.level is Level.REQUIRED
        ]
        return (False, "; ".join(missing)) if missing else (True, "every required capability present")

    def answer(self, check: Check) -> Outcome | None:
        return self.answer_now() if isinstance(check.request, CapabilitiesHeld) else None

    def details(self) -> dict[str, Any]:
        return {
            f"{c.capability} {c.target}": {"level": c.level.value, "ok": ok, "reason": why}
            for c, (ok, why) in self.results
        }

    def metrics(self) -> Iterable[Metric]:
        family = CAPABILITY.family()
        seen: list[bool | None] = [ok for _, (ok, _) in self.results] or [None] * len(self.watch.checks)
        for check, ok in zip(self.watch.checks, seen, strict=True):
            state = "unknown" if ok is None else ("present" if ok else "absent")
            for each in ("present", "absent", "unknown"):
                family.add_metric(
                    [check.capability, check.level.value, check.target, each], float(each == state)
                )
        yield family


# -------------------------------------------------------------------------- the probes
async def probe_once(session: ClientSession, probe: Probe, host: str, timeout: float) -> Outcome:
    """Present or not, and why, in one line. `host`: where the HTTP probes' ports are."""
    try:
        if isinstance(probe, HttpAnswer):
            return await _http_answer(session, probe, host, timeout)
        if isinstance(probe, MetricFamily):
            return await _metric_family(session, probe, host, timeout)
        if isinstance(probe, KvCapacity):
            return await _kv_capacity(session, probe, host, timeout)
        if isinstance(probe, TcpOpen):
            return await tcp_connect(probe.host, probe.port, timeout)
        return await asyncio.to_thread(zmq_answer, probe, timeout)
    except NoAnswer as exc:
        return False, f"{probe.what}: {exc}"


async def _http_answer(session: ClientSession, probe: HttpAnswer, host: str, timeout: float) -> Outcome:
    data = None if probe.body is None else json.dumps(probe.body).encode()
    reply = await http_reply(
        session, f"http://{_bracket(host)}:{probe.port}{probe.path}", timeout,
        read=BODY_BYTES, method=probe.method, data=data,
        headers={"Content-Type": "application/json"} if data else None,
    )  # fmt: skip
    said = f"{probe.method} {probe.path} returned {reply.status}"
    if reply.status != 200:
        return False, said
    if probe.answer_key is None:
        return True, said
    try:
        answer = json.loads(reply.body)
    except ValueError:
        return False, f"{said} without JSON"
    if not _holds(answer, probe.answer_key):
        return False, f"{said} without {probe.answer_key}"
    return True, f"{said} with {probe.answer_key}"


def _holds(answer: object, key: str, depth: int = 4) -> bool:
    """The key anywhere in the first few levels of a JSON answer (render answers nest it per prompt)."""
    if depth < 0:
        return False
    if isinstance(answer, dict):
        return key in answer or any(_holds(v, key, depth - 1) for v in answer.values())
    if isinstance(answer, list):
        return any(_holds(v, key, depth - 1) for v in answer[:4])
    return False


async def _read(session: ClientSession, url: str, timeout: float) -> tuple[int, str]:
    reply = await http_reply(session, url, timeout, read=METRICS_BYTES)  # /metrics, /get_server_info
    return reply.status, reply.body


async def _metric_family(session: ClientSession, probe: MetricFamily, host: str, timeout: float) -> Outcome:
    status, body = await _read(session, f"http://{_bracket(host)}:{probe.port}/metrics", timeout)
    if status != 200:
        return False, f"GET /metrics on :{probe.port} returned {status}"
    found = next((n for n in probe.names if _family_in(n, body)), None)
    if found is None:
        return False, f"GET /metrics on :{probe.port} has no {' or '.join(probe.names)}"
    return True, f"GET /metrics on :{probe.port} has {found}"


def _family_in(name: str, text: str) -> bool:
    return re.search(rf"^{re.escape(name)}(?:\{{| )", text, re.MULTILINE) is not None


_LABEL = re.compile(r'(\w+)="([^"]*)"')


async def _kv_capacity(session: ClientSession, probe: KvCapacity, host: str, timeout: float) -> Outcome:
    status, body = await _read(session, f"http://{_bracket(host)}:{probe.port}{probe.path}", timeout)
    tokens: int | None = None
    if probe.metric is not None:
        line = next((x for x in body.splitlines() if x.startswith(probe.metric + "{")), "")
        labels = dict(_LABEL.findall(line))
        if all(labels.get(name, "").isdigit() for name in probe.labels):
            tokens = math.prod(int(labels[name]) for name in probe.labels)
    elif probe.json_key is not None:
        with contextlib.suppress(ValueError, AttributeError):
            value = json.loads(body).get(probe.json_key)
            tokens = value if isinstance(value, int) and not isinstance(value, bool) else None
    where = f"{probe.metric} {' x '.join(probe.labels)}" if probe.metric else probe.json_key
    if status != 200 or tokens is None:
        return False, f"GET {probe.path} returned {status} without the KV pool's size ({where})"
    said = f"the KV pool holds {tokens} tokens ({where})"
    if tokens < probe.context:
        return False, f"{said}, less than one request of the recipe's context {probe.context}"
    return True, said


def zmq_answer(probe: ZmqAnswer, timeout: float) -> Outcome:
    """A publisher: a SUB socket's ZMTP handshake completes (a socket of another kind, or none, never
    completes it). A replay endpoint: a DEALER's request for batches past the last answers the end
    marker (vLLM 0.32.0 vllm/distributed/kv_events.py _service_replay)."""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    if probe.kind == "replay":
        sock = ctx.socket(zmq.DEALER)
        try:
            sock.connect(probe.endpoint)
            sock.send_multipart([b"", (2**64 - 2).to_bytes(8, "big")])
            if sock.poll(int(timeout * 1000)) and END_SEQ in sock.recv_multipart():
                return True, f"the replay endpoint {probe.endpoint} answered"
            return False, f"the replay endpoint {probe.endpoint} did not answer within {timeout:g} s"
        finally:
            sock.close(0)
    sock = ctx.socket(zmq.SUB)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    try:
        sock.connect(probe.endpoint)
        if monitor.poll(int(timeout * 1000)):
            recv_monitor_message(monitor)
            return True, f"ZMQ handshake with the publisher at {probe.endpoint}"
        return False, f"no ZMQ publisher completed a handshake at {probe.endpoint} within {timeout:g} s"
    finally:
        sock.disable_monitor()
        monitor.close(0)
        sock.close(0)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
