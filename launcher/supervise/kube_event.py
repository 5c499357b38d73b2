"""Why the pod ended or parked, recorded as a Kubernetes Event on its LeaderWorkerSet.

Under RecreateGroupOnPodRestart LWS deletes a failed group's pods, and their exit code, termination
message and previous logs with them; an Event on the LeaderWorkerSet outlives them (for the API
server's event TTL, one hour by default: kube-apiserver --event-ttl). It is posted with the pod's own
ServiceAccount token to the in-cluster API (core/v1 `POST /api/v1/namespaces/<ns>/events`; the pod's
Role needs `events: create`), only to a server the mounted `ca.crt` vouches for (client-go's
rest.InClusterConfig would fall back to the system trust store; LLMD_EVENT_SYSTEM_CA=true allows
that), in a daemon thread the caller waits for at most `seconds`: an API that is slow or gone never
holds up the pod's exit by more. Whatever fails is one log line, never the token's text; the token
goes into the Authorization header only, once it is known to be one header-safe line.

The recorder deduplicates, as client-go's EventRecorder correlates a repeated Event into one: a
reason already recorded by this pod is not posted again, so no caller keeps track of it.
"""

from __future__ import annotations

import datetime
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.contract.log import Log
from launcher.contract.lws import LWS_NAME
from launcher.contract.redact import REDACTED

COMPONENT = "llm-d-launcher"
MAX_MESSAGE = 1024  # bytes of the message kept (events.k8s.io/v1 limits `note` to 1 KiB; core/v1 is laxer)
LWS_API = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
# A bearer token as RFC 6750 section 2.1 defines it (b64token); a ServiceAccount JWT is one.
_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_MAX_TOKEN = 64 * 1024  # bytes read of the token file: a JWT is a few KiB


@dataclass(frozen=True)
class EventSettings:
    """The Event's settings (launcher/config/settings.py), from the pod's Settings or, when they
    failed as a whole, each from the env alone (`setting`: a field name -> its value)."""

    seconds: float
    account_dir: str
    system_ca: bool
    lws: str | None
    namespace: str | None
    pod: str | None

    @classmethod
    def read(cls, setting: Callable[[str], Any]) -> EventSettings:
        return cls(
            setting("event_seconds"),
            setting("service_account_dir"),
            setting("event_system_ca"),
            setting("lws_name"),
            setting("pod_namespace"),
            setting("pod_name"),
        )


@dataclass(frozen=True)
class EventTarget:
    """Where the Event goes and what it names: the API server, the LWS, this pod; the token it sends."""

    host: str
    port: int
    namespace: str
    lws: str
    pod: str
    token: str = field(repr=False)
    ca_file: str | None  # None: the system trust store (LLMD_EVENT_SYSTEM_CA)


def event_target(settings: EventSettings, environ: Mapping[str, str]) -> EventTarget | str:
    """The target, or why there is none (said in the one log line of a skipped Event). The API
    server's address is the in-cluster one the kubelet gives every container (client-go
    rest.InClusterConfig reads the same two variables)."""
    token_file = os.path.join(settings.account_dir, "token")
    ca = os.path.join(settings.account_dir, "ca.crt")
    namespace = settings.namespace or _read(os.path.join(settings.account_dir, "namespace"))
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not settings.lws:
        return f"{LWS_NAME} is not set (give it from the downward API label leaderworkerset.sigs.k8s.io/name)"
    if not os.path.isfile(token_file):
        return f"no ServiceAccount token is mounted at {token_file} (automountServiceAccountToken)"
    token = _read(token_file)
    if not _TOKEN.fullmatch(token):
        return (
            f"the ServiceAccount token at {token_file} is not one header-safe line (RFC 6750 b64token); "
            "fix the token's mount"
        )
    if not os.path.isfile(ca) and not settings.system_ca:
        return (
            f"no CA at {ca} to check the API server with: the token is sent only where the cluster's CA "
            "vouches (LLMD_EVENT_SYSTEM_CA=true allows the system trust store)"
        )
    if not namespace:
        return "POD_NAMESPACE is not set and the ServiceAccount mount names no namespace"
    if not host or not port.isdigit():
        return "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT do not name the API server"
    pod = settings.pod or environ.get("HOSTNAME", "")
    return EventTarget(
        host, int(port), namespace, settings.lws, pod, token, ca if os.path.isfile(ca) else None
    )


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


class EventRecorder:
    """Records why the pod ended or parked, each (reason, message) once; blocking, bounded by the
    settings' seconds (run it in a thread from the event loop)."""

    def __init__(self, settings: EventSettings, log: Log, environ: Mapping[str, str] = os.environ) -> None:
        self.settings, self.log, self.environ = settings, log, environ
        self._recorded: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def record(self, reason: str, message: str) -> bool:
        """True when the Event was created. `message`: already scrubbed of the pod's secrets; its first
        line is sent. Never raises."""
        message = message.split("\n", 1)[0]
        with self._lock:
            if (reason, message) in self._recorded or self.settings.seconds <= 0:
                return False
            self._recorded.add((reason, message))
        target = event_target(self.settings, self.environ)
        if isinstance(target, str):
            self.log.info("no Kubernetes Event recorded", why=target)
            return False
        where = f"{LWS_API[1]} {target.namespace}/{target.lws}"
        body = event_body(target, reason, message, datetime.datetime.now(datetime.timezone.utc))
        failed = _bounded(lambda: _post(target, body, self.settings.seconds), self.settings.seconds)
        if failed is not None:
            self.log.warning(
                "no Kubernetes Event recorded", why=failed.replace(target.token, REDACTED), on=where
            )
            return False
        self.log.info("Kubernetes Event recorded", on=where, reason=reason)
        return True


def _post(target: EventTarget, body: Mapping[str, Any], seconds: float) -> str | None:
    # Imported here, in the worker thread: http.client and ssl cost ~17 ms, paid only for an Event.
    from launcher.supervise.kube_post import post_event

    return post_event(target.host, target.port, target.namespace, target.token, target.ca_file, body, seconds)


def _bounded(post: Callable[[], str | None], seconds: float) -> str | None:
    """post() in a daemon thread, waited for at most `seconds`: None if it succeeded, else why not.
    Whatever it raises is one reason, its type and text (the caller hides the token in it)."""
    said: list[str | None] = []

    def attempt() -> None:
        try:
            said.append(post())
        except Exception as exc:  # a failure inside the recorder must not reach stderr as a traceback
            said.append(f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=attempt, name="kube-event", daemon=True)
    worker.start()
    worker.join(seconds)
    return said[0] if said else f"no answer within {seconds:g} s"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(_MAX_TOKEN).strip()
    except OSError:
        return ""
