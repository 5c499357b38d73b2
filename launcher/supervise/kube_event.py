"""Why the pod ended or parked, recorded as a Kubernetes Event on its LeaderWorkerSet.

Under RecreateGroupOnPodRestart LWS deletes a failed group's pods, and their exit code, termination
message and previous logs with them; an Event on the LeaderWorkerSet outlives them (for the API
server's event TTL, one hour by default: kube-apiserver --event-ttl). It is posted with the pod's own
ServiceAccount token to the in-cluster API (core/v1 `POST /api/v1/namespaces/<ns>/events`; the pod's
Role needs `events: create`), with the standard library only, in a daemon thread the caller waits
for at most `seconds`: an API that is slow or gone never holds up the pod's exit by more. Skipped
with one log line when there is no token, no LWS_NAME or POD_NAMESPACE, or the API refuses. The token
goes into the request's Authorization header only: never a log line, an argv or the plan.
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.contract.log import Log

COMPONENT = "llm-d-launcher"
MAX_MESSAGE = 1024  # bytes of the message kept (events.k8s.io/v1 limits `note` to 1 KiB; core/v1 is laxer)
LWS_API = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")


@dataclass(frozen=True)
class EventTarget:
    """Where the Event goes and what it names: the API server, the LWS, this pod."""

    host: str
    port: int
    namespace: str
    lws: str
    pod: str
    token_file: str
    ca_file: str


def event_target(environ: Mapping[str, str], account_dir: str) -> EventTarget | str:
    """The target, or why there is none (said in the one log line of a skipped Event)."""
    token, ca = os.path.join(account_dir, "token"), os.path.join(account_dir, "ca.crt")
    namespace = environ.get("POD_NAMESPACE") or _read(os.path.join(account_dir, "namespace"))
    lws = environ.get("LWS_NAME", "")
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not lws:
        return "LWS_NAME is not set (give it from the downward API label leaderworkerset.sigs.k8s.io/name)"
    if not os.path.isfile(token):
        return f"no ServiceAccount token is mounted at {token} (automountServiceAccountToken)"
    if not namespace:
        return "POD_NAMESPACE is not set and the ServiceAccount mount names no namespace"
    if not host or not port.isdigit():
        return "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT do not name the API server"
    pod = environ.get("POD_NAME") or environ.get("HOSTNAME", "")
    return EventTarget(host, int(port), namespace, lws, pod, token, ca)


def event_body(target: EventTarget, reason: str, message: str, now: datetime.datetime) -> dict[str, Any]:
    """A core/v1 Event on the LeaderWorkerSet; the pod, which the recreation deletes, is named in the
    message and as the related object and reporting instance."""
    stamp = now.astimezone(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    text = f"pod {target.pod}: {message}" if target.pod else message
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{target.lws}.", "namespace": target.namespace},
        "involvedObject": {
            "apiVersion": LWS_API[0],
            "kind": LWS_API[1],
            "name": target.lws,
            "namespace": target.namespace,
        },
        "related": {"apiVersion": "v1", "kind": "Pod", "name": target.pod, "namespace": target.namespace},
        "reason": reason,
        "message": text.encode()[:MAX_MESSAGE].decode(errors="ignore"),
        "type": "Warning",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": target.pod,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def post_event(target: EventTarget, body: Mapping[str, Any], timeout: float) -> str | None:
    """POST it; None when the API server created it, else why not (no token text in it)."""
    try:
        token = _read(target.token_file)
        context = ssl.create_default_context(
            cafile=target.ca_file if os.path.isfile(target.ca_file) else None
        )
        conn = http.client.HTTPSConnection(target.host, target.port, timeout=timeout, context=context)
        try:
            conn.request(
                "POST",
                f"/api/v1/namespaces/{target.namespace}/events",
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
    if reply.status == 201 or reply.status == 200:
        return None
    try:
        said = json.loads(detail).get("message", "")
    except ValueError:
        said = detail[:200]
    return f"the API server answered {reply.status}: {said}"


def record_event(
    reason: str,
    message: str,
    log: Log,
    *,
    seconds: float,
    account_dir: str,
    environ: Mapping[str, str] = os.environ,
) -> bool:
    """Record why the pod ended or parked, waiting at most `seconds`; True when the Event was created.
    `message`: the reason's first line, already scrubbed of known secrets."""
    if seconds <= 0:
        return False
    target = event_target(environ, account_dir)
    if isinstance(target, str):
        log.info("no Kubernetes Event recorded", why=target)
        return False
    body = event_body(target, reason, message.split("\n", 1)[0], datetime.datetime.now(datetime.timezone.utc))
    outcome: list[str | None] = []
    worker = threading.Thread(
        target=lambda: outcome.append(post_event(target, body, seconds)), name="kube-event", daemon=True
    )
    worker.start()
    worker.join(seconds)
    where = f"{LWS_API[1]} {target.namespace}/{target.lws}"
    if not outcome:
        log.warning("no Kubernetes Event recorded", why=f"no answer within {seconds:g} s", on=where)
        return False
    if outcome[0] is not None:
        log.warning("no Kubernetes Event recorded", why=outcome[0], on=where)
        return False
    log.info("Kubernetes Event recorded", on=where, reason=reason)
    return True


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""
