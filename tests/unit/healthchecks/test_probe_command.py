"""Bad input to the exec probe and to the probe server: one line, never a traceback, never 200."""

from __future__ import annotations

import asyncio
import http.server
import json
import sys
import threading

import pytest

from healthchecks.server import ProbeServer
from healthchecks.state import PodHealth
from launcher.cli import main
from launcher.contract.plan import Check, Probes
from launcher.contract.redact import Scrubber
from launcher.supervise.logs import configure
from tests.ports import free_port


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf", "-inf", "1e400", "1e300", "86401", "1e10"])
def test_probe_timeout_must_be_a_positive_number(timeout: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", "live", "--port", "1", f"--timeout={timeout}"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "--timeout" in err and "Traceback" not in err


def test_probe_timeout_up_to_a_day_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    """Finite but huge timeouts overflowed the socket's (OverflowError); up to a day is a timeout."""
    assert main(["probe", "live", "--port", "1", "--timeout=86400"]) == 1  # port 1 refuses at once
    assert "no answer from the launcher" in capsys.readouterr().out


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(4096), 2)
    except asyncio.TimeoutError:
        return b""
    finally:
        writer.close()


REQUESTS = [
    b"GET /livez HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET /livez HTTP/1.1\r\nContent-Length: x\r\n\r\n",
    b"\x16\x03\x01\x02\x00garbage\r\n\r\n",
    b"GET /livez HTTP/9.9\r\n\r\n",
    b"GET /livez HTTP/0.9\r\n\r\n",
    b"GET /livez\r\n\r\n",
]


def test_malformed_requests_are_refused_in_one_json_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    configure(True, Scrubber([]), sys.stderr)
    port = free_port()
    probes = Probes(port=port, ready=(Check("engine", "engine"),), started=Check("engine", "engine"))

    async def scenario() -> list[bytes]:
        server = ProbeServer(
            PodHealth(probes), "127.0.0.1", port, holder_of=lambda _: "another process", scrub=Scrubber([])
        )
        await server.start()
        try:
            answers = [await _exchange(port, request) for request in REQUESTS]
            answers.append(await _exchange(port, b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"))
            return answers
        finally:
            await server.stop()

    answers = asyncio.run(scenario())
    *bad, good = answers
    assert good.startswith(b"HTTP/1.1 200 ")
    for request, answer in zip(REQUESTS, bad, strict=True):
        assert b" 200 " not in answer.split(b"\r\n")[0], request
    err = capsys.readouterr().err
    assert "bad request" in err  # the malformed requests are reported, each on its own line
    for line in err.splitlines():
        assert isinstance(json.loads(line), dict), line


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"ok": true}')

    def log_message(self, *_: object) -> None:
        pass


def test_the_exec_probe_asks_where_llmd_probe_host_binds_the_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #34: a server bound to LLMD_PROBE_HOST answers there only; the exec probe asked
    127.0.0.1 whatever the setting, so a pod with LLMD_PROBE_HOST set was never live."""
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), _Ok)  # any 127/8 address is loopback
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = str(server.server_address[1])
        monkeypatch.setenv("LLMD_PROBE_HOST", "127.0.0.2")
        assert main(["probe", "live", "--port", port]) == 0, capsys.readouterr()
        monkeypatch.setenv("LLMD_PROBE_HOST", "0.0.0.0")  # a wildcard: asked on loopback
        assert main(["probe", "live", "--port", port]) == 1
        assert "no answer from the launcher on 127.0.0.1:" in capsys.readouterr().out
    finally:
        server.shutdown()
        server.server_close()


def test_a_probe_host_that_is_no_ip_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLMD_PROBE_HOST", "pod.example")
    assert main(["probe", "live", "--port", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "LLMD_PROBE_HOST" in err
