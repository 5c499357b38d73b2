"""The probe process: answers the kubelet's /livez, /readyz and /startupz from the launcher's latest
published answers, so a probe never waits for the launcher's event loop, its GIL or its CPU share.

The launcher (healthchecks/probe_publisher.py) binds the probe port, starts this program (standard
library only, started with `python -I -S` in tens of milliseconds) with the listening sockets, and
sends the three answers over a SOCK_SEQPACKET channel whenever they change (pushed when a phase, a
park, a check or a stop changes them; looked at every PUBLISH_INTERVAL for the rest), and a
heartbeat every HEARTBEAT_SECONDS otherwise. The process is idle between
probes, so the kernel's fair scheduler runs it as soon as a connection comes.

- Only a well-formed `GET /livez|/readyz|/startupz HTTP/1.0|1.1` without a body is answered here, byte
  for byte as aiohttp answers it in the launcher (tests/unit/healthchecks/test_probe_process.py
  compares the two). Every other request (/metrics, /kvevents, HEAD, a query, a malformed request)
  is relayed unchanged to the launcher's own aiohttp server on an abstract Unix socket, which
  answers it (and logs a bad one) as before.
- A stale answer must not lie: when the launcher has sent nothing for `silent_after` seconds (its
  loop blocked, the process stopped or hung) every probe answers 503 and says so. Before this
  process existed such a launcher answered nothing within the probes' timeoutSeconds (2 s for
  readiness in deploy/): a failure then, a failure now, with its reason.
- It dies with the launcher: PR_SET_PDEATHSIG, and the channel's end of file.
- How long each answer took goes back over the channel, for llmd_launcher_probe_duration_seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import struct
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

# Seconds between two looks of the launcher at its answers: a look costs ~0.1-0.4 ms of the launcher's
# CPU, so 20 ms looks made an idle launcher use 2.4 % of a core (goal 0.5 %, bench/results/supervisor.md);
# a phase, a park, a check that flips and a stop are pushed at once (PodHealth.changed, Supervisor
# on_stopping); what only time changes (a deadline, staleness of a peer) waits at most one look.
PUBLISH_INTERVAL = 0.25
HEARTBEAT_SECONDS = 0.25  # nothing changed for this long: the launcher says it is still there
SILENT_SECONDS = 2.0  # the launcher silent this long: every probe fails (readiness' timeoutSeconds)
KEEPALIVE_SECONDS = 75.0  # a connection without a whole request this long is closed (aiohttp's keep-alive)
MAX_HEAD = 8190  # a longer request head goes to aiohttp, which refuses it
ACCEPT_BATCH = 64  # connections accepted in one wake-up, at most (asyncio's create_server takes 100)
IDENTITY_HEADER = "Llmd-Launcher-Identity"  # healthchecks/http.py (not imported: stdlib only here)

# The channel: one message per send, a kind byte, the sender's time.monotonic(), a JSON payload.
SNAPSHOT, HEARTBEAT, LATENCIES = b"S", b"H", b"L"
STAMP = struct.Struct("<d")
MAX_SNAPSHOT = 1 << 22  # bytes: a snapshot is a few KB; the kernel refuses one past its send buffer
MAX_REPORT = 1000  # durations in one report, well within REPORT_BYTES
REPORT_SECONDS = 0.1  # durations are reported this long after the first unreported one (or before a relay)
REPORT_BYTES = 1 << 16

_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(rb"[\t\x20-\x7e]*")


def message(kind: bytes, at: float, payload: Any = None) -> bytes:
    return kind + STAMP.pack(at) + (b"" if payload is None else json.dumps(payload).encode())


def read_message(data: bytes) -> tuple[bytes, float, Any]:
    payload = data[1 + STAMP.size :]
    return data[:1], STAMP.unpack_from(data, 1)[0], json.loads(payload) if payload else None


@dataclass(frozen=True)
class Request:
    path: str
    minor: int  # HTTP/1.<minor>
    keep_alive: bool
    connection_header: bool  # the answer names the connection's fate, as aiohttp's does


def parse_head(head: bytes, paths: Collection[str]) -> Request | None:
    """A probe this process answers (a GET of one of `paths`, the snapshot's), or None: the launcher's
    aiohttp server gets the request."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] != b"GET" or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1"):
        return None
    path = parts[1].decode("ascii", "replace")
    if path not in paths:
        return None
    hosts, tokens = 0, set[bytes]()
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
            return None
        name = name.lower()
        if name in (b"content-length", b"transfer-encoding", b"upgrade", b"expect"):
            return None
        if name == b"host":
            hosts += 1
        elif name == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b","))
    minor = 1 if parts[2] == b"HTTP/1.1" else 0
    if (minor == 1 and hosts != 1) or hosts > 1 or not tokens <= {b"close", b"keep-alive"}:
        return None
    if len(tokens) > 1:
        return None
    if minor == 1:
        return Request(path, 1, keep_alive=b"close" not in tokens, connection_header=b"close" in tokens)
    return Request(path, 0, keep_alive=b"keep-alive" in tokens, connection_header=b"keep-alive" in tokens)


@dataclass
class Answers:
    """The launcher's latest answers and when it last said anything."""

    silent_after: float
    heard_at: float | None = None  # the launcher's clock (time.monotonic) at its latest message
    published_at: float = 0.0  # ... at its latest snapshot
    snapshot: dict[str, Any] = field(default_factory=dict)
    encoded: dict[str, bytes] = field(default_factory=dict)  # bodies without ticking fields

    def take(self, at: float, snapshot: dict[str, Any]) -> None:
        self.published_at, self.snapshot = at, snapshot
        self.encoded = {
            path: _encode(answer["body"])
            for path, answer in snapshot["answers"].items()
            if not answer["ticking"]
        }

    def answer(self, path: str, now: float) -> tuple[int, bytes]:
        silent = None if self.heard_at is None else now - self.heard_at
        if silent is None or silent > self.silent_after or not self.snapshot:
            return 503, _encode(self.silence(path, silent))
        answer = self.snapshot["answers"][path]
        if path in self.encoded:
            return answer["status"], self.encoded[path]
        body = dict(answer["body"])  # the fields that count seconds, counted on to now
        for name, seconds in answer["ticking"].items():
            body[name] = round(seconds + now - self.published_at, 1)
        return answer["status"], _encode(body)

    def silence(self, path: str, silent: float | None) -> dict[str, Any]:
        why = (
            "the launcher has published no answer yet"
            if silent is None or not self.snapshot
            else f"the launcher has published nothing for {silent:.1f} s (its loop is blocked or it hangs)"
        )
        phase = self.snapshot.get("phase", "unknown")
        endpoint = self.snapshot["answers"][path]  # its field and kind, as the launcher declared them
        if endpoint["liveness"]:
            return {endpoint["key"]: False, "reason": why}
        return {endpoint["key"]: False, "phase": phase, "failing": {"launcher": why}}

    @property
    def paths(self) -> Collection[str]:
        """The probes answered here: the snapshot's (none before the first: the launcher answers)."""
        answers: dict[str, Any] = self.snapshot.get("answers", {})
        return answers.keys()


def _encode(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


class _Date:
    """The Date header, formatted once a second as aiohttp does."""

    def __init__(self) -> None:
        self.second, self.text = -1, ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self.second:
            self.second, self.text = now, time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now))
        return self.text


class Front:
    """The process's state: the answers, the relay's address, the durations not yet reported."""

    def __init__(self, answers: Answers, channel: socket.socket, backend: str) -> None:
        self.answers, self.channel, self.backend = answers, channel, backend
        self.ended = asyncio.get_running_loop().create_future()  # the launcher's end of the channel closed
        self.date = _Date()
        self.pending: list[tuple[str, float]] = []

    def respond(self, request: Request) -> bytes:
        began = time.perf_counter()
        self.on_channel()  # what the launcher sent before the probe came counts, whatever epoll's order
        status, body = self.answers.answer(request.path, time.monotonic())
        snapshot = self.answers.snapshot
        identity = snapshot.get("identity", "")
        head = [f"HTTP/1.{request.minor} {status} {HTTPStatus(status).phrase}"]
        if identity:
            head.append(f"{IDENTITY_HEADER}: {identity}")
        head += [
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            f"Date: {self.date()}",
            f"Server: {snapshot.get('server', '')}",
        ]
        if request.connection_header:
            head.append("Connection: keep-alive" if request.keep_alive else "Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        if not self.pending:  # one report per REPORT_SECONDS, not a wake-up of the launcher per probe
            asyncio.get_running_loop().call_later(REPORT_SECONDS, self.report)
        self.pending.append((request.path[1:], time.perf_counter() - began))
        if len(self.pending) >= MAX_REPORT:
            self.report()
        return data

    def report(self) -> None:
        """The durations of the probes answered since the last report; dropped if the launcher lags."""
        pending, self.pending = self.pending, []
        if not pending:  # sent already: a full report goes at once
            return
        with contextlib.suppress(OSError):  # BlockingIOError included
            self.channel.send(message(LATENCIES, time.monotonic(), pending))

    def accept(self, listener: socket.socket) -> None:
        """Each waiting connection: a probe whose request is already in is answered at once and
        closed (about a third of the CPU of a transport's life cycle); any other connection becomes a
        Connection, with what was read."""
        loop = asyncio.get_running_loop()
        for _ in range(ACCEPT_BATCH):
            try:
                client, _ = listener.accept()
            except OSError:  # BlockingIOError: none waiting; EMFILE and the like: the next wake-up
                return
            client.setblocking(False)
            try:
                data = client.recv(MAX_HEAD + 1)
            except BlockingIOError:
                data = b""
            except OSError:
                client.close()
                continue
            end = data.find(b"\r\n\r\n")
            if not self.answers.snapshot:  # the first one names the probes: read it before the head
                self.on_channel()
            request = parse_head(data[:end], self.answers.paths) if end == len(data) - 4 else None
            if request is not None and not request.keep_alive:
                answer = self.respond(request)
                try:
                    sent = client.send(answer)
                except OSError:
                    sent = -1
                if sent == len(answer) or sent < 0:
                    client.close()
                    continue
                data, answer = b"", answer[sent:]  # the rest goes through a transport
                loop.create_task(self._finish(client, answer)).add_done_callback(_ignore)
                continue
            loop.create_task(self._adopt(client, data)).add_done_callback(_ignore)

    async def _adopt(self, client: socket.socket, received: bytes) -> None:
        await asyncio.get_running_loop().connect_accepted_socket(lambda: Connection(self, received), client)

    async def _finish(self, client: socket.socket, rest: bytes) -> None:
        transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, client)
        transport.write(rest)
        transport.close()

    def on_channel(self) -> None:
        while True:
            try:
                data = self.channel.recv(MAX_SNAPSHOT)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # the launcher closed its end or died
                if not self.ended.done():
                    self.ended.set_result(None)
                return
            kind, at, payload = read_message(data)
            self.answers.heard_at = at
            if kind == SNAPSHOT:
                self.answers.take(at, payload)


class Connection(asyncio.Protocol):
    """One client connection: probes answered here until a request the launcher must answer; from
    then on every byte is relayed both ways."""

    def __init__(self, front: Front, received: bytes = b"") -> None:
        self.front = front
        self.buffer = b""
        self.received = received  # read before the connection became this protocol's (Front.accept)
        self.client: asyncio.Transport | None = None
        self.relay: asyncio.Transport | None = None
        self.relaying = False
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.client = transport
        self._close_when_idle()  # a client that never sends, or never ends its head, is closed too
        if self.received:  # before anything the transport reads
            self.data_received(self.received)

    def _close_when_idle(self) -> None:
        """Close the connection KEEPALIVE_SECONDS from now unless a whole request comes first: counted
        from the connection or the last answer, so a head sent a byte at a time cannot hold it."""
        if self.idle is not None:
            self.idle.cancel()
        assert self.client is not None
        self.idle = asyncio.get_running_loop().call_later(KEEPALIVE_SECONDS, self.client.close)

    def data_received(self, data: bytes) -> None:
        assert self.client is not None
        if self.relaying:
            self._to_launcher(data)
            return
        self.buffer += data
        while self.buffer:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD or b"\n\n" in self.buffer:
                    self._relay()
                return
            request = parse_head(self.buffer[:end], self.front.answers.paths)
            if request is None:
                self._relay()
                return
            self.buffer = self.buffer[end + 4 :]
            self.client.write(self.front.respond(request))
            if not request.keep_alive:
                self.client.close()
                return
            self._close_when_idle()

    def eof_received(self) -> bool:
        if self.relay is not None and self.relay.can_write_eof():
            self.relay.write_eof()
            return True
        return self.relaying  # a relay still connecting gets the EOF's effect when the answer ends

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()
        if self.relay is not None:
            self.relay.close()

    def _relay(self) -> None:
        assert self.client is not None
        if self.idle is not None:  # the launcher's server times a relayed connection
            self.idle.cancel()
        self.front.report()  # a /metrics relayed now counts every probe answered before it
        self.relaying = True
        self.client.pause_reading()
        task = asyncio.get_running_loop().create_task(self._connect())
        task.add_done_callback(_ignore)

    async def _connect(self) -> None:
        assert self.client is not None
        loop = asyncio.get_running_loop()
        try:
            self.relay, _ = await loop.create_unix_connection(lambda: Upstream(self), self.front.backend)
        except OSError:
            self.client.close()
            return
        if self.client.is_closing():
            self.relay.close()
            return
        self._to_launcher(self.buffer)
        self.buffer = b""
        self.client.resume_reading()

    def _to_launcher(self, data: bytes) -> None:
        if self.relay is not None:
            self.relay.write(data)
        else:
            self.buffer += data


def _ignore(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


class Upstream(asyncio.Protocol):
    """The launcher's side of a relayed connection."""

    def __init__(self, client: Connection) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        if self.client.client is not None:
            self.client.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.client.client is not None:
            self.client.client.close()


def die_with(parent: int) -> None:
    """SIGKILL this process when the launcher dies, even of SIGKILL."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not Linux: the channel's end of file ends it
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the launcher died before the line above took effect
        sys.exit(1)


async def serve(listeners: list[socket.socket], channel: socket.socket, backend: str, silent: float) -> None:
    loop = asyncio.get_running_loop()
    front = Front(Answers(silent), channel, backend)
    channel.setblocking(False)
    front.on_channel()  # the first snapshot was sent before this process started
    loop.add_reader(channel.fileno(), front.on_channel)
    for listener in listeners:
        listener.setblocking(False)
        loop.add_reader(listener.fileno(), front.accept, listener)
    await front.ended


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the launcher's probe process (started by the launcher)")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--listen", required=True, help="listening socket fds, comma-separated")
    parser.add_argument("--channel", type=int, required=True)
    parser.add_argument("--backend", required=True, help="the launcher's abstract Unix address, in hex")
    parser.add_argument("--silent-after", type=float, default=SILENT_SECONDS)
    ns = parser.parse_args(argv)
    die_with(ns.parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the launcher's to handle
    listeners = [socket.socket(fileno=int(fd)) for fd in ns.listen.split(",")]
    channel = socket.socket(fileno=ns.channel)
    backend = bytes.fromhex(ns.backend).decode("ascii")  # Linux autobind: "\0" and five hex digits
    asyncio.run(serve(listeners, channel, backend, ns.silent_after))


if __name__ == "__main__":
    main()
