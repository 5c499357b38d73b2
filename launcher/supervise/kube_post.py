"""The one HTTPS request of a Kubernetes Event (launcher/supervise/kube_event.py), apart so that
http.client and ssl (~17 ms of imports, `python -X importtime`) are loaded only when an Event can be
posted: never on the death path of a pod outside an LWS."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Mapping
from typing import Any


def post_event(
    host: str,
    port: int,
    namespace: str,
    token: str,
    ca_file: str | None,
    body: Mapping[str, Any],
    timeout: float,
) -> str | None:
    """POST it; None when the API server created it, else why not. ca_file None: the system trust store."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        try:
            conn.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/events",
                body=json.dumps(body).encode(),
                headers={
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/json",
                    "Accept": "application/json",
                },
            )
            reply = conn.getresponse()
            detail = reply.read(2048).decode(errors="replace")
        finally:
            conn.close()
    except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"
    if reply.status in (200, 201):
        return None
    try:
        said = json.loads(detail).get("message", "")
    except (ValueError, AttributeError):
        said = detail[:200]
    return f"the API server answered {reply.status}: {said}"
