"""Which checks make a pod ready or started, per role (README.md, "Probes").

- A pod that serves (leader, data-parallel ranks, Mooncake services): every process that answers
  HTTP must answer 200 (engine /health or the DP supervisor's /readyz, render and disagg sidecar
  /health). Start-up ends when the engine answers once. The sidecar is never asked about the engine.
- A worker (headless): its engine process must live, and the leader's API must be reachable. The
  leader's API opens only after the whole group has loaded, so that is also when a worker's start-up
  ends: it has joined.
"""

from __future__ import annotations

from collections.abc import Sequence

from launcher.plan import (
    LEADER_PLACEHOLDER,
    Check,
    EventsFlowing,
    Probes,
    ProcessSpec,
    Role,
    RoleKind,
    TcpCheck,
)


def build_probes(
    role: Role,
    processes: Sequence[ProcessSpec],
    port: int,
    leader_port: int | None = None,
    progress: str | None = None,
    events_flowing: bool = False,
) -> Probes:
    """events_flowing: the recipe asked for "KV events flowing once a request was served" as well."""
    engine = processes[0]
    if role.kind is RoleKind.WORKER and leader_port is not None:
        leader = Check(
            "leader", engine.name, TcpCheck(role.leader_address or LEADER_PLACEHOLDER, leader_port)
        )
        return Probes(
            port, ready=(Check(engine.name, engine.name), leader), started=leader, progress=progress
        )
    ready = tuple(Check(p.name, p.name, p.health) for p in processes if p.health is not None)
    started = next((c for c in ready if c.process == engine.name), Check(engine.name, engine.name))
    ready = ready or (started,)
    if events_flowing:
        ready += (Check("kv-events", engine.name, EventsFlowing()),)
    return Probes(port, ready=ready, started=started, progress=progress)
