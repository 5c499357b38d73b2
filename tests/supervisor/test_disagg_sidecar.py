"""The disagg sidecar STAND-IN speaks the Go sidecar's nixlv2 protocol (llm-d/llm-d-router
pkg/sidecar/proxy/connector_nixlv2.go): what it sends the prefill pod, what it forwards to its decode
rank, and what it does when prefill fails. Fake engines record what reaches them; the real engines
behind it: tests/group/test_pd_group.py."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.pods import STANDINS
from tests.ports import free_port

PARAMS = {"do_remote_prefill": True, "remote_engine_id": "prefill-engine", "remote_block_ids": [[0, 1]],
          "remote_host": "10.77.0.12", "remote_port": 5600}  # fmt: skip


@dataclass
class FakeEngine:
    """An HTTP server that records each POST (headers, JSON body) and answers with `answer`."""

    answer: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]
    port: int = field(default_factory=free_port)
    seen: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)

    def start(self) -> http.server.ThreadingHTTPServer:
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                engine.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status, reply = engine.answer(body)
                payload = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


@pytest.fixture
def sidecar() -> Iterator[Callable[..., tuple[str, FakeEngine]]]:
    started: list[tuple[subprocess.Popen[bytes], http.server.ThreadingHTTPServer]] = []

    def start(*flags: str) -> tuple[str, FakeEngine]:
        decode = FakeEngine(lambda body: (200, {"choices": [{"text": "decoded"}], "seen": body}))
        server = decode.start()
        port = free_port()
        argv = [str(STANDINS / "llm-d-router-disagg-sidecar"), f"--port={port}",
                f"--model-server-port={decode.port}", "--kv-connector=nixlv2", "--secure-proxy=false",
                *flags]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        started.append((proc, server))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return url, decode
            except httpx.HTTPError:
                time.sleep(0.05)
        raise AssertionError("the stand-in sidecar did not start")

    yield start
    for proc, server in started:
        proc.terminate()
        proc.wait(timeout=10)
        server.shutdown()


def _prefill(status: int = 200, fail_first: int = 0) -> FakeEngine:
    calls = []

    def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        calls.append(body)
        if len(calls) <= fail_first:
            return 503, {"error": "busy"}
        return status, {"kv_transfer_params": PARAMS} if status == 200 else {"error": "prefill boom"}

    engine = FakeEngine(answer)
    engine.start()
    return engine


def test_the_two_steps_prefill_one_token_then_decode_with_the_params_prefill_returned(
    sidecar: Callable[..., tuple[str, FakeEngine]],
) -> None:
    url, decode = sidecar()
    prefill = _prefill()
    body = {"model": "m", "prompt": "p", "max_tokens": 50, "min_tokens": 5, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0}  # fmt: skip
    reply = httpx.post(f"{url}/v1/completions", json=body, timeout=10,
                       headers={"x-prefiller-host-port": f"127.0.0.1:{prefill.port}"})  # fmt: skip
    assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == "decoded"
    ((p_headers, first),) = prefill.seen
    assert first == {"model": "m", "prompt": "p", "max_tokens": 1, "stream": False, "temperature": 0,
                     "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False,
                                            "remote_engine_id": None, "remote_block_ids": None,
                                            "remote_host": None, "remote_port": None}}  # fmt: skip
    ((d_headers, second),) = decode.seen
    assert second == {**body, "kv_transfer_params": PARAMS}  # the client's request, untouched otherwise
    assert p_headers["x-request-id"] == d_headers["x-request-id"] != ""


def test_chat_caps_max_completion_tokens_too(sidecar: Callable[..., tuple[str, FakeEngine]]) -> None:
    url, _ = sidecar()
    prefill = _prefill()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 40}
    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10,
               headers={"x-prefiller-host-port": f"127.0.0.1:{prefill.port}"})  # fmt: skip
    ((_, first),) = prefill.seen
    assert (first["max_tokens"], first["max_completion_tokens"]) == (1, 1)


def test_a_prefill_error_goes_back_to_the_client_and_decode_is_not_asked(
    sidecar: Callable[..., tuple[str, FakeEngine]],
) -> None:
    url, decode = sidecar()
    prefill = _prefill(status=500)
    reply = httpx.post(f"{url}/v1/completions", json={"model": "m", "prompt": "p"}, timeout=10,
                       headers={"x-prefiller-host-port": f"127.0.0.1:{prefill.port}"})  # fmt: skip
    assert (reply.status_code, reply.json()) == (500, {"error": "prefill boom"})
    assert decode.seen == []
    gone = httpx.post(f"{url}/v1/completions", json={"model": "m", "prompt": "p"}, timeout=10,
                      headers={"x-prefiller-host-port": f"127.0.0.1:{free_port()}"})  # fmt: skip
    assert gone.status_code == 502 and decode.seen == []


def test_a_busy_prefill_is_retried_as_often_as_the_flag_says(
    sidecar: Callable[..., tuple[str, FakeEngine]],
) -> None:
    url, decode = sidecar("--prefill-max-retries=1")
    prefill = _prefill(fail_first=1)
    reply = httpx.post(f"{url}/v1/completions", json={"model": "m", "prompt": "p"}, timeout=10,
                       headers={"x-prefiller-host-port": f"127.0.0.1:{prefill.port}"})  # fmt: skip
    assert reply.status_code == 200 and len(prefill.seen) == 2 and len(decode.seen) == 1


def test_without_a_prefiller_the_request_goes_straight_to_decode(
    sidecar: Callable[..., tuple[str, FakeEngine]],
) -> None:
    url, decode = sidecar()
    body = {"model": "m", "prompt": "p", "max_tokens": 7}
    assert httpx.post(f"{url}/v1/completions", json=body, timeout=10).status_code == 200
    assert [seen for _, seen in decode.seen] == [body]
