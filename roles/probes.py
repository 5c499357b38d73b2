"""Which checks make a pod ready or started, per role (README.md, "Probes").

- A pod that serves (leader, data-parallel ranks, Mooncake services): every process that answers
  HTTP must answer 200 (engine /health or the DP supervisor's /readyz, render and disagg sidecar
  /health). Start-up ends when the engine answers once. The sidecar is never asked about the engine.
- A worker (headless): its engine process must live, and the leader's API must be reachable. The
  leader's API opens only after the whole group has loaded, so that is also when a worker's start-up
  ends: it has joined.
- A serving engine (vLLM leader or API pod, each DP rank behind the DP supervisor, the SGLang leader)
  is watched for forward progress (ProgressWatch): its token counters must move, or a canary (the
  smallest request its runner serves: `completion_body`, `pooling_body`) must come back. A headless
  worker has no API; a stalled worker stops the leader's steps, so the leader's watch covers the
  group's workers, and the worker's plan says so.
- Every pod of a multi-pod group watches its peers' launchers (the leader its workers, a worker its
  leader): one that answered once and then stops answering ends this pod too, so LWS recreates the
  group at once. Worker names follow LWS's naming: the leader `<lws>-<g>.<subdomain>.<ns>`, worker i
  `<lws>-<g>-<i>.<subdomain>.<ns>` (kubernetes-sigs/lws `pkg/utils/pod/pod_utils.go`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from launcher.contract.addresses import is_ip
from launcher.contract.plan import (
    LEADER_PLACEHOLDER,
    Check,
    EventsFlowing,
    PdCanary,
    Peer,
    Probes,
    ProcessSpec,
    ProgressWatch,
    Role,
    RoleKind,
    StartupOutput,
    TcpCheck,
)


def build_probes(
    role: Role,
    processes: Sequence[ProcessSpec],
    port: int,
    leader_port: int | None = None,
    progress: StartupOutput | None = None,
    events_flowing: bool = False,
    peer_lost_seconds: float = 0.0,
    leader_name: str | None = None,
    forward: ProgressWatch | None = None,
    startup_seconds: float = 0.0,
    kv_transfer: tuple[str, ...] = (),
    pd_canary: PdCanary | None = None,
) -> Probes:
    """events_flowing: the recipe asked for "KV events flowing once a request was served" as well.
    peer_lost_seconds: 0 watches no peer; leader_name: the leader as LWS names it (peers are watched
    by DNS name: a recreated pod keeps its name, not its IP). forward: the engine's progress watch."""
    engine = processes[0]
    peers = group_peers(role, port, leader_name) if peer_lost_seconds > 0 else ()
    if role.kind is RoleKind.WORKER and leader_port is not None:
        leader = Check(
            "leader", engine.name, TcpCheck(role.leader_address or LEADER_PLACEHOLDER, leader_port)
        )
        return Probes(
            port,
            ready=(Check(engine.name, engine.name), leader),
            started=leader,
            progress=progress,
            peers=peers,
            forward_watched_by="leader" if forward is not None else None,
            peer_lost_seconds=peer_lost_seconds,
            startup_seconds=startup_seconds,
        )
    if forward is not None and role.kind is RoleKind.LEADER and role.group_size > 1:
        forward = replace(forward, covers=tuple(f"worker {i}" for i in range(1, role.group_size)))
    ready = tuple(Check(p.name, p.name, p.health) for p in processes if p.health is not None)
    started = next((c for c in ready if c.process == engine.name), Check(engine.name, engine.name))
    ready = ready or (started,)
    if events_flowing:
        ready += (Check("kv-events", engine.name, EventsFlowing()),)
    return Probes(
        port,
        ready=ready,
        started=started,
        progress=progress,
        peers=peers,
        forward=forward,
        peer_lost_seconds=peer_lost_seconds,
        startup_seconds=startup_seconds,
        kv_transfer=kv_transfer,
        pd_canary=pd_canary,
    )


CANARY_INPUT = "Hi"  # a fixed, tiny input: one or two tokens in any tokenizer


def completion_body(model: str) -> dict[str, object]:
    """A one-token completion (OpenAI /v1/completions), greedy so it costs the same every time."""
    return {"model": model, "prompt": CANARY_INPUT, "max_tokens": 1, "temperature": 0}


def pooling_body(model: str) -> dict[str, object]:
    """One input to pool (OpenAI /v1/embeddings and vLLM's /pooling take the same shape)."""
    return {"model": model, "input": CANARY_INPUT}


def group_peers(role: Role, port: int, leader: str | None) -> tuple[Peer, ...]:
    """The pods of this pod's group it watches: a worker its leader; the leader its workers, whose
    names follow from the leader's DNS name (none when the leader is given as an IP)."""
    if role.group_size < 2 or role.kind is RoleKind.SERVICE or not leader or leader == LEADER_PLACEHOLDER:
        return ()
    if role.worker_index > 0:
        return (Peer("leader", leader, port),)
    if is_ip(leader):
        return ()
    first, dot, rest = leader.partition(".")
    return tuple(Peer(f"worker {i}", f"{first}-{i}{dot}{rest}", port) for i in range(1, role.group_size))
