"""The probe process (healthchecks/probe_process.py): it answers the three probes while the launcher's
loop is busy or blocked, byte for byte as the launcher's aiohttp server does, relays everything else,
fails every probe once the launcher falls silent, is replaced when it dies, and ends with its channel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from healthchecks import probe_process
from healthchecks.probe_process import SNAPSHOT, STAMP, Request, parse_head
from healthchecks.probe_publisher import RESPAWN_SECONDS
from healthchecks.server import ProbeServer
from healthchecks.state import PodHealth
from launcher.contract.endpoints import PROBE_ENDPOINTS
from launcher.contract.plan import Check, Probes
from launcher.contract.redact import Scrubber
from launcher.supervise.logs import configure
from tests.polling import ended
from tests.ports import free_port

SECRET = "hf_probe_process_secret_42"
PATHS = tuple(e.path for e in PROBE_ENDPOINTS.values())


@pytest.fixture(autouse=True)
def _logs_to_this_tests_stderr() -> None:
    """The launcher's logger writes where this test captures (an earlier test's stream is closed)."""
    configure(True, Scrubber([]), sys.stderr)


def _health(port: int) -> PodHealth:
    health = PodHealth(Probes(port, ready=(Check("engine", "engine"),), started=Check("engine", "engine")))
    health.identity = "pod-0@2026-12-01T00:00:00.000000+00:00"
    health.progress.feed(f"Loading weights from /models/{SECRET}")  # a string to scrub, if it shows
    return health


def _exchange(port: int, request: bytes) -> bytes:
    """A blocking client: while it waits the test's event loop (the launcher's) cannot run."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:  # a loaded machine
        client.sendall(request)
        data = b""
        while not _complete(data, request) and (chunk := client.recv(65536)):
            data += chunk
        return data


def _complete(data: bytes, request: bytes) -> bool:
    """`data` holds the whole answer to each request in `request` (by its Content-Length; none to a HEAD)."""
    for _ in range(request.count(b"\r\n\r\n")):
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return False
        length = re.search(rb"Content-Length: (\d+)", data[:end])
        size = end + 4 + (int(length.group(1)) if length and not request.startswith(b"HEAD") else 0)
        if len(data) < size:
            return False
        data = data[size:]
    return True


async def _from_aiohttp(backend: bytes, request: bytes) -> bytes:
    """The same request, answered by the launcher's aiohttp application itself (its Unix socket)."""
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.setblocking(False)
        await loop.sock_connect(client, backend)
        await loop.sock_sendall(client, request)
        data = b""
        while not _complete(data, request):
            chunk = await asyncio.wait_for(loop.sock_recv(client, 65536), 10)
            if not chunk:
                break
            data += chunk
        return data


def _dateless(answer: bytes) -> bytes:
    """Without the two things that differ between two answers a moment apart: the Date, and the
    seconds /startupz counts (test_seconds_count_on_between_publications checks those)."""
    answer = re.sub(rb"Date: [^\r]*\r\n", b"Date: -\r\n", answer)
    return re.sub(rb'(seconds":)\d\.\d', rb"\1-.-", answer)


def _serving(
    scenario: Callable[[ProbeServer], Awaitable[Any]],
    silent_after: float = 2.0,
) -> Any:
    port = free_port()

    async def run() -> Any:
        server = ProbeServer(
            _health(port), "127.0.0.1", port, lambda _: "x", Scrubber([SECRET]), silent_after
        )
        await server.start()
        try:
            return await scenario(server)
        finally:
            await server.stop()

    return asyncio.run(run())


FAST = [
    b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /livez HTTP/1.0\r\n\r\n",  # ApacheBench
    b"GET /readyz HTTP/1.1\r\nHost: 10.0.0.1:8090\r\nUser-Agent: kube-probe/1.30\r\nAccept: */*\r\n"
    b"Connection: close\r\n\r\n",  # the kubelet
    b"GET /startupz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"GET /startupz HTTP/1.1\r\nHost: x\r\nConnection: Keep-Alive\r\n\r\n",
    b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n",  # pipelined
]


def test_probes_are_answered_with_the_loop_blocked_byte_for_byte_as_aiohttp_answers() -> None:
    async def scenario(server: ProbeServer) -> list[tuple[bytes, bytes]]:
        await asyncio.sleep(0.1)  # a publication after start-up
        assert server.publisher is not None
        # Blocking calls: the launcher's loop stands still, only the probe process can answer.
        ours = [_exchange(server.port, request) for request in FAST]
        theirs = [await _from_aiohttp(server.publisher.backend, request) for request in FAST]
        return list(zip(ours, theirs, strict=True))

    for request, (ours, theirs) in zip(FAST, _serving(scenario), strict=True):
        assert ours.startswith(b"HTTP/1."), request
        assert _dateless(ours) == _dateless(theirs), request
        assert SECRET.encode() not in ours and b"Llmd-Launcher-Identity: pod-0@" in ours


@pytest.mark.parametrize(
    "request_",
    [
        b"HEAD /livez HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /livez?verbose=1 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /livez HTTP/1.1\r\n\r\n",  # no Host: aiohttp refuses it
        b"GET /livez HTTP/0.9\r\n\r\n",
        b"\x16\x03\x01\x02\x00garbage\r\n\r\n",
        b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_every_other_request_is_the_launchers_to_answer(request_: bytes) -> None:
    async def scenario(server: ProbeServer) -> tuple[bytes, bytes]:
        assert server.publisher is not None
        loop = asyncio.get_running_loop()
        relayed = await loop.run_in_executor(None, _exchange, server.port, request_)  # the loop runs
        return relayed, await _from_aiohttp(server.publisher.backend, request_)

    relayed, direct = _serving(scenario)
    assert relayed and _dateless(relayed) == _dateless(direct)


def test_metrics_are_relayed_and_count_the_probes_the_probe_process_answered() -> None:
    async def scenario(server: ProbeServer) -> bytes:
        await asyncio.sleep(0.1)
        for _ in range(3):
            _exchange(server.port, b"GET /readyz HTTP/1.0\r\n\r\n")  # the loop blocked: not aiohttp's
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, _exchange, server.port, b"GET /metrics HTTP/1.0\r\n\r\n")

    metrics = _serving(scenario).decode()
    assert metrics.startswith("HTTP/1.0 200 OK") and SECRET not in metrics
    assert 'llmd_launcher_probe_duration_seconds_count{endpoint="readyz"} 3.0' in metrics


def test_only_plain_probes_are_answered_by_the_probe_process() -> None:
    assert parse_head(b"GET /livez HTTP/1.1\r\nHost: x", PATHS) == Request("/livez", 1, True, False)
    assert parse_head(b"GET /readyz HTTP/1.0", PATHS) == Request("/readyz", 0, False, False)
    assert parse_head(b"GET /startupz HTTP/1.1\r\nHost: x\r\nConnection: close", PATHS) == Request(
        "/startupz", 1, False, True
    )
    for head in [
        b"GET /livez HTTP/1.1",  # no Host
        b"GET /livez HTTP/1.1\r\nHost: x\r\nHost: y",
        b"GET /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 4",
        b"GET /livez HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked",
        b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c",
        b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close, keep-alive",
        b"GET /livez HTTP/1.1\r\nHost: x\r\nBad Header",
        b"GET /livez HTTP/1.1\r\nHost: x\r\n folded",
        b"GET /livez HTTP/1.1\r\nHost: \xff",
        b"GET  /livez HTTP/1.1\r\nHost: x",
        b"get /livez HTTP/1.1\r\nHost: x",
        b"POST /livez HTTP/1.1\r\nHost: x",
        b"GET /livez/ HTTP/1.1\r\nHost: x",
    ]:
        assert parse_head(head, PATHS) is None, head
    assert set(PATHS) == {"/livez", "/readyz", "/startupz"}
    assert parse_head(b"GET /livez HTTP/1.1\r\nHost: x", ()) is None  # before the first snapshot


def _body(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def test_a_silent_launcher_fails_every_probe_and_says_why() -> None:
    async def scenario(server: ProbeServer) -> list[tuple[int, dict[str, Any]]]:
        await asyncio.sleep(0.1)
        get = b"GET %s HTTP/1.0\r\n\r\n"
        seen = [_body(_exchange(server.port, get % b"/livez"))]
        time.sleep(1.6)  # the launcher's loop blocked: nothing published for longer than 1 s
        seen += [_body(_exchange(server.port, get % path.encode())) for path in PATHS]
        await asyncio.sleep(0.2)  # its loop runs again
        seen.append(_body(_exchange(server.port, get % b"/livez")))
        return seen

    before, live, ready, started, after = _serving(scenario, silent_after=1.0)
    assert before == (200, {"live": True, "phase": "preflight"}) == after
    silent = r"the launcher has published nothing for \d+\.\d s \(its loop is blocked or it hangs\)"
    assert live[0] == 503 and live[1]["live"] is False
    assert re.fullmatch(silent, live[1]["reason"])
    # Each answer says the seconds as it was asked (a loaded machine asks the next a tenth later).
    for (code, body), key in ((ready, "ready"), (started, "started")):
        assert code == 503 and body[key] is False and body["phase"] == "preflight", body
        assert list(body["failing"]) == ["launcher"] and re.fullmatch(silent, body["failing"]["launcher"])


def test_seconds_count_on_between_publications() -> None:
    async def scenario(server: ProbeServer) -> list[float]:
        await asyncio.sleep(0.1)
        get = b"GET /startupz HTTP/1.0\r\n\r\n"
        first = _body(_exchange(server.port, get))[1]["seconds"]
        time.sleep(0.45)  # nothing published meanwhile (and not yet silent)
        return [first, _body(_exchange(server.port, get))[1]["seconds"]]

    first, later = _serving(scenario)
    assert later - first >= 0.3  # counted on from the publication (else it stands still)


def test_a_probe_process_that_dies_is_replaced_and_no_probe_is_refused() -> None:
    async def scenario(server: ProbeServer) -> tuple[int, int, bytes]:
        assert server.publisher is not None and server.publisher.process is not None
        await asyncio.sleep(RESPAWN_SECONDS + 0.1)  # past the respawn limit
        first = server.publisher.process.pid
        os.kill(first, signal.SIGKILL)
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        # Connected while no probe process runs: the kernel queues it on the launcher's socket.
        answer = await loop.run_in_executor(None, _exchange, server.port, b"GET /livez HTTP/1.0\r\n\r\n")
        assert server.publisher.process is not None
        return first, server.publisher.process.pid, answer

    first, second, answer = _serving(scenario)
    assert second != first and answer.startswith(b"HTTP/1.0 200 OK")
    assert ended(first) and ended(second)  # the server's stop ended the second too


def test_what_the_probe_process_writes_to_stderr_becomes_one_log_event(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A message it cannot read ends the process with a traceback on its stderr: the launcher's log
    carries it as one event of its schema, scrubbed, then how the process ended; a new one answers."""
    configure(True, Scrubber([SECRET]), sys.stderr)  # capsys's stderr

    async def scenario(server: ProbeServer) -> bytes:
        assert server.publisher is not None and server.publisher.channel is not None
        server.publisher.channel.send(SNAPSHOT + STAMP.pack(0.0) + b"{not json: " + SECRET.encode())
        await asyncio.sleep(RESPAWN_SECONDS + 0.5)  # it dies; the next looks log it and start another
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, _exchange, server.port, b"GET /livez HTTP/1.0\r\n\r\n")

    answer = _serving(scenario)
    assert answer.startswith(b"HTTP/1.0 200 OK")
    lines = capsys.readouterr().err.splitlines()
    events = [json.loads(line)["message"] for line in lines]  # every line of the log is one JSON event
    wrote = [event for event in events if event.startswith("the probe process wrote: ")]
    # The traceback's tail (its first line is cut when the checkout's path is long: /work/wt/NAME).
    assert len(wrote) == 1 and "JSONDecodeError" in wrote[0], events
    assert "Traceback" in wrote[0] or wrote[0].startswith("the probe process wrote: ..."), events
    assert any(re.match(r"the probe process \(pid \d+\) exited with code 1;", event) for event in events)
    assert SECRET not in "\n".join(lines)


def test_the_probe_process_ends_when_its_channel_closes() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.send(probe_process.message(probe_process.HEARTBEAT, time.monotonic()))
    process = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            probe_process.__file__,
            f"--parent={os.getpid()}",
            f"--listen={listener.fileno()}",
            f"--channel={theirs.fileno()}",
            "--backend=00",
        ],
        pass_fds=(listener.fileno(), theirs.fileno()),
    )
    theirs.close()
    try:
        time.sleep(0.3)
        assert process.poll() is None
        ours.close()  # as when the launcher dies, of anything
        assert process.wait(timeout=5) == 0
    finally:
        process.kill()
        listener.close()


def test_the_probe_process_sends_the_identity_header_the_peers_read() -> None:
    """probe_process.py may import only the standard library, so it restates the header's name."""
    from healthchecks.http import IDENTITY_HEADER

    assert probe_process.IDENTITY_HEADER == IDENTITY_HEADER


class _Front:
    """What a Connection asks of the process's Front: an answer to each whole request."""

    def respond(self, request: Request) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

    def report(self) -> None:
        pass


@pytest.mark.parametrize(
    "sends",
    [
        [],  # connects and sends nothing
        [b"GET /li", b"v", b"e", b"z", b" ", b"H", b"T"],  # a head a byte at a time, never ended
        [b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"],  # answered, then idle on a kept-alive connection
    ],
    ids=["silent", "trickled-head", "idle-after-answer"],
)
def test_a_connection_without_a_whole_request_is_closed_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch, sends: list[bytes]
) -> None:
    """Each open connection holds a descriptor of the probe process: one that never completes a
    request (a slow or broken client on the pod IP) is closed KEEPALIVE_SECONDS after it connected or
    was last answered, whatever it trickles meanwhile."""
    monkeypatch.setattr(probe_process, "KEEPALIVE_SECONDS", 0.5)

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: probe_process.Connection(_Front()),  # type: ignore[arg-type]
            "127.0.0.1",
            0,
        )
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        began = time.monotonic()
        with contextlib.suppress(ConnectionError):  # the server may close it while it trickles
            for chunk in sends:
                writer.write(chunk)
                await writer.drain()
                await asyncio.sleep(0.1)
            while await asyncio.wait_for(reader.read(65536), 10):  # answers, then the server's close
                pass
        took = time.monotonic() - began
        writer.close()
        server.close()
        return took

    took = asyncio.run(scenario())
    assert took < 5  # closed by the server (0.5 s, plus a loaded machine), not by the 10 s read timeout


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_sigkilled_probe_process_is_reported_once_as_killed_whoever_reaps_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #34: the supervisor's reaper (a child subreaper, waitpid(-1)) reaped the SIGKILLed probe
    process first and logged it as an orphan (code 137); the publisher's Popen then found no child
    and reported "exited with code 0". One report, as it happened: killed by signal 9."""
    from launcher.supervise.spawn import SubprocessSpawner

    configure(True, Scrubber([SECRET]), sys.stderr)  # capsys's stderr

    async def scenario(server: ProbeServer) -> list[tuple[int, int]]:
        assert server.publisher is not None and server.publisher.process is not None
        spawner = SubprocessSpawner(server.spared)  # as run.py builds the supervisor's
        pid = server.publisher.process.pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not _zombie(pid) and time.monotonic() < deadline:  # blocking: the publisher cannot look
            time.sleep(0.01)
        reaped = spawner.reap()  # the supervisor's reaper gets there first
        server.publisher.publish()
        return reaped

    reaped = _serving(scenario)
    assert reaped == []  # not the supervisor's to report (it would say "reaped orphaned process")
    events = [json.loads(line)["message"] for line in capsys.readouterr().err.splitlines()]
    ends = [event for event in events if event.startswith("the probe process (pid ")]
    assert len(ends) == 1 and " was killed by signal 9;" in ends[0], events
