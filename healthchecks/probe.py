"""`llm-d-launcher probe live|ready|startup`: an exec probe that asks the launcher's probe server.

Kept to the standard library (http.client) and plain constants: the kubelet forks this every period
on every pod, so it must start in tens of milliseconds, not import the launcher's settings stack.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os

from launcher.config.defaults import PROBE_PORT
from launcher.contract.endpoints import PROBE_ENDPOINTS
from launcher.stderr import say

MAX_TIMEOUT = 86400  # seconds; the kubelet's own timeoutSeconds for a probe is far shorter


def probe(which: str, port: int | None = None, host: str | None = None, timeout: float = 2.0) -> int:
    """0 when the probe server answers 200, 1 otherwise; one line saying why on stdout (the kubelet
    records it in the pod's events). host: where the server listens (`host_from_env`)."""
    if not 0 < timeout <= MAX_TIMEOUT:  # a socket refuses the rest (nan, inf, 1e300) with a traceback
        say(
            f"llm-d-launcher: error: --timeout {timeout!r} is not a number of seconds above 0, at most "
            f"{MAX_TIMEOUT} (a day); fix: give e.g. --timeout 2"
        )
        return 2
    if port is None:
        port = _port_from_env()
        if port is None:
            return 2
    if host is None:
        host = _host_from_env()
        if host is None:
            return 2
    path = PROBE_ENDPOINTS[which].path
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        status, body = reply.status, reply.read(4096)
    except (OSError, http.client.HTTPException) as exc:
        print(f"{which}: no answer from the launcher on {host}:{port}{path}: {exc}", flush=True)
        return 1
    finally:
        connection.close()
    print(f"{which}: {status} {_summary(body)}", flush=True)
    return 0 if status == 200 else 1


def _port_from_env() -> int | None:
    raw = os.environ.get("LLMD_PROBE_PORT", str(PROBE_PORT))
    if raw.isdigit() and 1 <= int(raw) <= 65535:
        return int(raw)
    say(
        f"llm-d-launcher: error: LLMD_PROBE_PORT={raw!r} is not a port number; "
        "fix: give 1-65535, or pass --port"
    )
    return None


def _host_from_env() -> str | None:
    """Where the probe server listens: LLMD_PROBE_HOST when it names one address (a server bound
    there answers nowhere else, loopback included); unset, empty or a wildcard: loopback."""
    raw = os.environ.get("LLMD_PROBE_HOST", "").strip()
    try:
        address = ipaddress.ip_address(raw) if raw else None
    except ValueError:
        say(
            f"llm-d-launcher: error: LLMD_PROBE_HOST={raw[:60]!r} is not an IP address; "
            "fix: give the address the probe server binds to, or leave it empty"
        )
        return None
    if address is None or address.is_unspecified:
        return "::1" if address is not None and address.version == 6 else "127.0.0.1"
    return str(address)


def _summary(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:200]
    if isinstance(data, dict) and isinstance(data.get("failing"), dict):
        return "; ".join(f"{k}: {v}" for k, v in data["failing"].items())[:500]
    return json.dumps(data, separators=(",", ":"))[:500]
