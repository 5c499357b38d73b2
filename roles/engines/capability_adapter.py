"""CapabilityAdapter: how one engine family exposes the capability vocabulary
(launcher/contract/capabilities.py), with the upstream source of each fact. Each family module
declares one; roles/capabilities.py turns a pool's capabilities into probes with it, so the running
pod's watcher (healthchecks/capabilities.py) names no engine."""

from __future__ import annotations

from collections.abc import Mapping

from launcher.contract.record import record

RENDER_INPUT = "Hi"


@record
class MetricNames:
    """The /metrics families behind one logical metric, and where the engine defines them."""

    names: tuple[str, ...]  # any of them present passes (a rename across releases lists both)
    source: str


@record
class KvPool:
    """Where an engine reports its KV pool's size in tokens (KvCapacity's fields)."""

    path: str
    source: str
    metric: str | None = None
    labels: tuple[str, ...] = ()  # multiplied: blocks x tokens per block
    json_key: str | None = None


@record
class CapabilityAdapter:
    # api.render.* -> the path the engine serves it on (empty: the engine serves no render endpoint)
    render_paths: Mapping[str, str]
    render_source: str
    metrics: Mapping[str, MetricNames]  # metric.* -> its families
    context_flag: str  # the engine flag holding the recipe's context length
    kv_pool: KvPool  # where the engine reports its KV pool's size
    side_channel_host_env: str | None = None  # the variable holding the NIXL side channel's host


def render_body(capability: str, model: str) -> dict[str, object]:
    """The smallest request of each render endpoint's OpenAI/Anthropic shape."""
    if capability == "api.render.completions":
        return {"model": model, "prompt": RENDER_INPUT}
    message = [{"role": "user", "content": RENDER_INPUT}]
    if capability == "api.render.messages":
        return {"model": model, "max_tokens": 1, "messages": message}
    return {"model": model, "messages": message}
