"""STAND-IN for the Kubernetes API server's Events endpoint (core/v1 `POST
/api/v1/namespaces/<ns>/events`), which cannot run here: HTTPS on loopback with a certificate signed
by a CA made for the test, as a pod sees the API server (the CA in the ServiceAccount mount's ca.crt).
It records each request and answers as the API server does: 201 with the created Event, or a
`Status` with the code it is told to give (403 for a Role without `events: create`)."""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORBIDDEN = (
    'events is forbidden: User "system:serviceaccount:llm-d:default" cannot create resource "events" in '
    'API group "" in the namespace "llm-d"'
)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class EventsApi:
    """The stand-in's address, what it saw, and the ServiceAccount mount a pod would have."""

    port: int
    account_dir: Path
    token: str
    seen: list[Seen] = field(default_factory=list)
    answer: int = 201

    def env(
        self, namespace: str = "llm-d", lws: str = "kimi-decode", pod: str = "kimi-decode-0"
    ) -> dict[str, str]:
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
            "POD_NAMESPACE": namespace,
            "LWS_NAME": lws,
            "POD_NAME": pod,
            "LLMD_SERVICE_ACCOUNT_DIR": str(self.account_dir),
        }


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA (the mount's ca.crt) and a server certificate for IP 127.0.0.1 signed by it."""
    ca_key, ca, key, csr, cert = (
        directory / n for n in ("ca.key", "ca.crt", "tls.key", "tls.csr", "tls.crt")
    )
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=stand-in-ca",
             "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=kubernetes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", "1", "-out", str(cert), "-extfile", str(directory / "san.ext"))  # fmt: skip
    return ca, cert, key


def serve_events_api(workdir: Path, token: str = "stand-in-token-7f3a9c0e5d21b8") -> Iterator[EventsApi]:
    certs = workdir / "certs"
    account = workdir / "serviceaccount"
    certs.mkdir()
    account.mkdir()
    ca, cert, key = make_certificates(certs)
    (account / "ca.crt").write_bytes(ca.read_bytes())
    (account / "token").write_text(token)
    api = EventsApi(0, account, token)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            api.seen.append(Seen("POST", self.path, dict(self.headers.items()), body))
            if api.answer == 201:
                reply = {
                    **body,
                    "metadata": {**body["metadata"], "name": body["metadata"]["generateName"] + "x1"},
                }
            else:
                reply = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": api.answer,
                         "reason": "Forbidden", "message": FORBIDDEN}  # fmt: skip
            payload = json.dumps(reply).encode()
            self.send_response(api.answer)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    api.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
