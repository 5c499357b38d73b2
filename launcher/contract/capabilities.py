"""The capability contract: what a pod promises its router and guide beyond answering /health.

Engine-neutral names, the first seven from llm-d's proposal (llm-d/llm-d
`proposals/model-server-capability-contract.md` @0172f04d), the rest for the P/D path it leaves to
later work. A recipe pool requires or expects names (launcher/config/recipe.py `capabilities:`, with
defaults derived in roles/capabilities.py); the engine's adapter (roles/engines/) turns each into a
probe below, and the running pod runs them (healthchecks/capabilities.py). Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from launcher.contract.record import record


class Level(str, Enum):
    REQUIRED = "required"  # absent: /readyz 503, an Event, the metric
    EXPECTED = "expected"  # absent: the metric and a warning alert only
    OFF = "off"  # a recipe turns a derived default off


# name -> what holds when it is present (docs/probes-and-watchers.md, `plan`, `capabilities check`).
VOCABULARY: Mapping[str, str] = {
    "api.render.completions": "POST /v1/completions/render answers 200 with token IDs",
    "api.render.chat-completions": "POST /v1/chat/completions/render answers 200 with token IDs",
    "api.render.messages": "POST /v1/messages/render answers 200 with token IDs",
    "metric.queue-depth": "/metrics carries the engine's waiting-requests family (router queue scorer)",
    "metric.kv-cache-utilization": "/metrics carries the engine's KV-cache usage family (router scorer)",
    "kv-events.publisher-reachable": "a ZMQ subscriber completes its handshake with each rank's publisher",
    "kv-events.replay-reachable": "each rank's replay endpoint answers a replay request",
    "kv-transfer.side-channel-listening": "each rank's NIXL side channel accepts connections on the "
    "host:port it advertises",
    "kv-transfer.peer-side-channel-reachable": "the P/D peer's NIXL side channel accepts connections "
    "from this pod",
    "disagg.sidecar-answering": "the disagg sidecar answers GET /health on each of its ports",
    "kv-store.master-reachable": "the KV store's master accepts connections on its RPC port",
    "kv-cache.context-fit": "the engine's KV pool, as it reports it, holds one request of the recipe's "
    "context",
}
PROPOSAL_NAMES = tuple(VOCABULARY)[:7]  # the proposal's own vocabulary (PR 0)


@record
class HttpAnswer:
    """An HTTP call whose answer is judged: 200 and, with `answer_key`, a JSON object holding it
    (vLLM 0.32 answers the render paths 403 without --enable-scale-out)."""

    port: int
    method: str
    path: str
    body: Mapping[str, object] | None = None
    answer_key: str | None = None

    @property
    def what(self) -> str:
        return f"{self.method} {self.path}" + (f" answers {self.answer_key}" if self.answer_key else "")


@record
class MetricFamily:
    """The engine's /metrics carries one of `names` (the family this engine release calls it)."""

    port: int
    names: tuple[str, ...]
    source: str  # the engine file and line that defines it

    @property
    def what(self) -> str:
        return f"GET /metrics has {' or '.join(self.names)}"


@record
class ZmqAnswer:
    """A ZMQ endpoint of the right kind: a publisher a SUB completes its handshake with, or a replay
    ROUTER that answers `[b"", seq]` with its end marker."""

    endpoint: str  # tcp://host:port or ipc://path
    kind: str  # "publisher" or "replay"

    @property
    def what(self) -> str:
        ask = "SUB handshake with" if self.kind == "publisher" else "replay request to"
        return f"ZMQ {ask} {self.endpoint}"


@record
class TcpOpen:
    """A TCP connection opens (a side channel listening, a store master reachable)."""

    host: str
    port: int

    @property
    def what(self) -> str:
        return f"connect {self.host}:{self.port}"


@record
class KvCapacity:
    """The engine's KV pool, in tokens, as it reports it on GET `path`: the product of `labels` of the
    `metric` family's sample, or the JSON answer's `json_key`; at least `context` tokens."""

    port: int
    path: str
    context: int
    source: str
    metric: str | None = None
    labels: tuple[str, ...] = ()
    json_key: str | None = None

    @property
    def what(self) -> str:
        said = " x ".join(self.labels) if self.metric else self.json_key
        return f"GET {self.path}: {said} >= {self.context} tokens"


Probe = HttpAnswer | MetricFamily | ZmqAnswer | TcpOpen | KvCapacity


@record
class CapabilityCheck:
    """One capability at one place (a rank, a port, a peer), and who asked for it."""

    capability: str
    level: Level
    probe: Probe
    target: str  # "rank 0 :8000", "peer prefill 10.0.0.5:5600": named in /readyz, metric and alert
    by: str  # "recipe pools.decode.capabilities", "derived: pools.x.kv_events"


@record
class CapabilityWatch:
    """The pod's capability checks: first after the engine is healthy and before /readyz first says
    200, then every `interval` seconds and after any process restart."""

    checks: tuple[CapabilityCheck, ...]
    interval: float
    runtime: str  # the engine family, as `capabilities check` reports the detected runtime

    @property
    def required(self) -> tuple[CapabilityCheck, ...]:
        return tuple(c for c in self.checks if c.level is Level.REQUIRED)


@record
class CapabilitiesHeld:
    """A readiness check's request: every required capability present (the capability watcher answers)."""


def to_requirements(levels: Mapping[str, Level]) -> dict[str, object]:
    """The proposal's `requirements.modelServer.capabilities` shape: a required name as itself, an
    expected one as {name, level} (the proposal has no levels; its names are all required)."""
    items: list[object] = [
        name if level is Level.REQUIRED else {"name": name, "level": level.value}
        for name, level in levels.items()
    ]
    return {"requirements": {"modelServer": {"capabilities": items}}}


def from_requirements(document: Mapping[str, object]) -> dict[str, Level]:
    """The inverse of to_requirements; raises ValueError naming what is wrong."""
    requirements = document.get("requirements")
    server = requirements.get("modelServer") if isinstance(requirements, Mapping) else None
    items = server.get("capabilities") if isinstance(server, Mapping) else None
    if not isinstance(items, list):
        raise ValueError("no requirements.modelServer.capabilities list")
    levels: dict[str, Level] = {}
    for item in items:
        name, level = (item, "required") if isinstance(item, str) else _named(item)
        if name not in VOCABULARY:
            raise ValueError(f"{name!r} is not a capability ({', '.join(VOCABULARY)})")
        levels[name] = Level(level)
    return levels


def _named(item: object) -> tuple[str, str]:
    if isinstance(item, Mapping) and isinstance(item.get("name"), str):
        level = item.get("level", "required")
        if level in ("required", "expected"):
            return item["name"], str(level)
    raise ValueError(f"{item!r} is neither a capability name nor {{name, level: required|expected}}")
