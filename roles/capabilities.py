"""A pool's capabilities (launcher/contract/capabilities.py): derived from what the recipe already says
the pool serves, then the pool's own `capabilities:` list, then, for one pod, a probe per place.

Derived, so a guide's recipe needs no list:
- KV events published: `kv-events.publisher-reachable`, and `kv-events.replay-reachable` with a replay port.
- A router whose token producer targets the render sidecar (router.render_port), or whose precise-prefix
  scorer reads the pool's KV events (router.kv_events_port) and so tokenizes through the pod's own render
  endpoints (llm-d/llm-d guides/precise-prefix-cache-routing): the completions and chat-completions
  render endpoints, where the engine serves render at all.
- Every serving engine: `metric.queue-depth` and `metric.kv-cache-utilization`, which the router's
  queue and kv-cache-utilization scorers read on every API port it targets.
- P/D: the pod's own NIXL side channel (`nixl`), disagg sidecar, store master; a decode pool's prefill
  peer's side channel is `expected` (it is the peer's, not this pod's, to fix).
- The recipe's context length (the engine's context flag): `kv-cache.context-fit`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from launcher.config.recipe import NIXL_SECTION, EnginePool, Pool, Recipe, optional_spec
from launcher.contract.capabilities import (
    CapabilitiesHeld,
    CapabilityCheck,
    CapabilityWatch,
    HttpAnswer,
    KvCapacity,
    Level,
    MetricFamily,
    Probe,
    TcpOpen,
    ZmqAnswer,
)
from launcher.contract.plan import Check, HttpCheck, Plan, RoleKind
from roles.engines.capability_adapter import CapabilityAdapter, render_body
from roles.engines.family import EngineFamily

RENDERED = ("api.render.completions", "api.render.chat-completions")
METRICS = ("metric.queue-depth", "metric.kv-cache-utilization")
Levels = dict[str, tuple[Level, str]]  # capability -> (level, who asked)


def pool_capabilities(recipe: Recipe, name: str) -> Levels:
    """The pool's capabilities in vocabulary order: derived, then the recipe's list over them."""
    from roles.engines import family_of

    pool = recipe.pools[name]
    family = family_of(pool)
    adapter = family.capabilities
    if not isinstance(pool, EnginePool) or adapter is None:
        return {}
    where = f"pools.{name}"
    master = family.store_master(pool, where)
    levels: Levels = {}

    def add(capability: str, why: str, level: Level = Level.REQUIRED) -> None:
        levels.setdefault(capability, (level, f"derived: {why}"))

    events = optional_spec(pool, "kv_events")
    if events is not None:
        add("kv-events.publisher-reachable", f"{where}.kv_events")
        if events.replay_port is not None:
            add("kv-events.replay-reachable", f"{where}.kv_events.replay_port")
    router = pool.router
    if router is not None and adapter.render_paths:
        if router.render_port is not None:
            for capability in RENDERED:
                add(capability, f"{where}.router.render_port (the router's token producer)")
        elif router.kv_events_port is not None:
            for capability in RENDERED:
                add(capability, f"{where}.router.kv_events_port (precise-prefix scoring tokenizes by render)")
    for capability in METRICS:
        add(capability, "the router's queue and kv-cache-utilization scorers")
    if optional_spec(pool, NIXL_SECTION) is not None:
        add("kv-transfer.side-channel-listening", f"{where}.{NIXL_SECTION}")
    if getattr(pool, "disagg_sidecar", None) is not None:
        add("disagg.sidecar-answering", f"{where}.disagg_sidecar")
        if (peer := _prefill_peer(recipe, name)) is not None:
            add(
                "kv-transfer.peer-side-channel-reachable",
                f"pools.{peer}.{NIXL_SECTION} (the P/D peer's)",
                Level.EXPECTED,
            )
    if isinstance(pool.args.get(adapter.context_flag), int):
        add("kv-cache.context-fit", f"{where}.args.{adapter.context_flag}")
    if master is not None:
        add("kv-store.master-reachable", master.setting)
    for spec in pool.capabilities:
        levels[spec.name] = (Level(spec.level), f"recipe {where}.capabilities")
    return {c: v for c, v in sorted(levels.items(), key=_in_vocabulary_order) if v[0] is not Level.OFF}


def _in_vocabulary_order(item: tuple[str, Any]) -> int:
    from launcher.contract.capabilities import VOCABULARY

    return list(VOCABULARY).index(item[0])


def _prefill_peer(recipe: Recipe, name: str) -> str | None:
    """The pool a decode pool takes KV from over NIXL: the other pool with a side channel and no sidecar."""
    return next(
        (
            other
            for other, pool in recipe.pools.items()
            if other != name
            and optional_spec(pool, NIXL_SECTION) is not None
            and getattr(pool, "disagg_sidecar", None) is None
        ),
        None,
    )


def with_capabilities(
    plan: Plan,
    recipe: Recipe,
    pool: Pool,
    family: EngineFamily[Any],
    interval: float,
    prefiller: str | None,
) -> Plan:
    """The plan with its capability checks, and, when one is required, the readiness check they gate.
    Only pods that serve an API check: a headless worker serves nothing the router calls."""
    adapter = family.capabilities
    if interval <= 0 or adapter is None or plan.role.kind not in (RoleKind.LEADER, RoleKind.DP_RANKS):
        return plan
    name = plan.role.pool
    model = recipe.model_for(pool).name if isinstance(pool, EnginePool) else ""
    checks = tuple(
        CapabilityCheck(capability, level, probe, target, by)
        for capability, (level, by) in pool_capabilities(recipe, name).items()
        for target, probe in _probes(capability, plan, recipe, name, adapter, model, prefiller)
    )
    if not checks:
        return plan
    watch = CapabilityWatch(checks, interval, family.name)
    probes = plan.probes
    if watch.required:
        probes = replace(
            probes, ready=(*probes.ready, Check("capabilities", plan.engine.name, CapabilitiesHeld()))
        )
    return replace(plan, capabilities=watch, probes=probes)


def _split(address: str) -> tuple[str, int]:
    """host:port (IPv6 in brackets) -> (host, port); the settings and recipe validated it."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


_RANK = re.compile(r"-rank(\d+)$")


def _ports(plan: Plan, *names: str) -> list[tuple[str, int]]:
    """(target, port) of every port whose name is one of `names` or `<name>-rank<r>`."""
    found = []
    for process, port in plan.ports:
        base, rank = _RANK.sub("", port.name), _RANK.search(port.name)
        if base in names:
            found.append(
                (f"rank {rank[1]} :{port.number}" if rank else f"{process} :{port.number}", port.number)
            )
    return found


def _probes(
    capability: str,
    plan: Plan,
    recipe: Recipe,
    name: str,
    adapter: CapabilityAdapter,
    model: str,
    prefiller: str | None,
) -> list[tuple[str, Probe]]:
    engine_ports = _ports(plan, "http")
    sidecar = next((p for p in plan.processes for x in p.ports if x.name.startswith("sidecar")), None)
    plain = sidecar is not None and isinstance(sidecar.health, HttpCheck)  # not TLS: asked over HTTP
    routed = _ports(plan, "sidecar") if plain else engine_ports  # the ports the router targets
    family, _, _ = capability.partition(".")
    if family == "api":
        path = adapter.render_paths.get(capability)
        if path is None:
            return []
        router = getattr(recipe.pools[name], "router", None)
        on = _ports(plan, "render") if router is not None and router.render_port else engine_ports
        body = render_body(capability, model)
        return [(target, HttpAnswer(port, "POST", path, body, "token_ids")) for target, port in on]
    if family == "metric":
        metric = adapter.metrics[capability]
        return [(target, MetricFamily(port, metric.names, metric.source)) for target, port in routed]
    if capability.startswith("kv-events.") and plan.kv_events is not None:
        replay = capability == "kv-events.replay-reachable"
        out: list[tuple[str, Probe]] = []
        for s in plan.kv_events.sources:
            port, ipc = (s.replay_port, s.replay_ipc) if replay else (s.port, s.ipc)
            if port is not None:
                endpoint = ipc or f"tcp://127.0.0.1:{port}"
                out.append(
                    (f"rank {s.rank} :{port}", ZmqAnswer(endpoint, "replay" if replay else "publisher"))
                )
        return out
    if capability == "kv-transfer.side-channel-listening":
        host = plan.engine.env.get(adapter.side_channel_host_env or "", "127.0.0.1")
        return [(f"{t} on {host}", TcpOpen(host, port)) for t, port in _ports(plan, NIXL_SECTION)]
    if capability == "kv-transfer.peer-side-channel-reachable":
        peer = _prefill_peer(recipe, name)
        nixl = optional_spec(recipe.pools[peer], NIXL_SECTION) if peer else None
        if prefiller is None or nixl is None:
            return []
        host, _ = _split(prefiller)
        return [(f"peer {peer} {host}:{nixl.side_channel_port}", TcpOpen(host, nixl.side_channel_port))]
    if capability == "disagg.sidecar-answering":
        if sidecar is None:
            return []
        health = sidecar.health
        if isinstance(health, HttpCheck):
            return [(t, HttpAnswer(port, "GET", health.path)) for t, port in routed]
        return [(t, TcpOpen("127.0.0.1", port)) for t, port in _ports(plan, "sidecar")]
    if capability == "kv-store.master-reachable" and plan.needs.store_master is not None:
        host, port = _split(plan.needs.store_master.rpc)
        return [(f"{plan.needs.store_master.name} {host}:{port}", TcpOpen(host, port))]
    if capability == "kv-cache.context-fit":
        pool = recipe.pools[name]
        context = pool.args.get(adapter.context_flag) if isinstance(pool, EnginePool) else None
        if not isinstance(context, int) or not engine_ports:
            return []
        target, port = engine_ports[0]
        kv = adapter.kv_pool
        capacity = KvCapacity(port, kv.path, context, kv.source, kv.metric, kv.labels, kv.json_key)
        return [(target, capacity)]
    return []
