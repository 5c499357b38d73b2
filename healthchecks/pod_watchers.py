"""The one factory of the pod's watchers: which ones the final plan asks for, each built from it.

Adding a watcher is one module (a Watcher subclass, healthchecks/watcher.py) and one line here.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable

from healthchecks.checks import CheckRunner
from healthchecks.state import PodHealth
from healthchecks.watcher import Watcher
from launcher.config.settings import Settings
from launcher.contract.log import Log
from launcher.contract.phases import STOPPING
from launcher.contract.plan import Plan


def build_watchers(
    plan: Plan,
    health: PodHealth,
    settings: Settings,
    log: Log,
    *,
    parks: bool,
    record_event: Callable[[str, str], bool] | None = None,
) -> tuple[Watcher, ...]:
    """In start order (the KV-event watcher subscribes before the engine binds: no early batch is
    missed). Intervals and timeouts: LLMD_CHECK_INTERVAL, LLMD_CHECK_TIMEOUT. `parks`: the pod parks
    rather than exit on what a restart cannot fix (an LWS group, launcher/parking.py). `record_event`:
    records a Kubernetes Event on the LWS (launcher/supervise/kube_event.py), None: none."""
    probes = plan.probes
    assert probes is not None
    watchers: list[Watcher] = [CheckRunner(health, settings.check_interval, settings.check_timeout, log)]
    if plan.capabilities is not None:
        from healthchecks.capabilities import CapabilityWatcher

        watchers.append(
            CapabilityWatcher(plan.capabilities, health, settings.check_timeout, log, record_event)
        )
    if plan.kv_events is not None:
        from healthchecks.kvevents.relay import KvEventRelay
        from healthchecks.kvevents.watcher import KvEventWatcher

        watchers.append(KvEventWatcher(plan.kv_events, log, token_ids=settings.kv_events_token_ids))
        if any(s.ipc for s in plan.kv_events.sources):  # IPv6 pod: the router reaches the relay
            watchers.append(KvEventRelay(plan.kv_events, log))
    if probes.startup_seconds > 0:
        from healthchecks.deadline import StartupDeadline

        hydration = None
        if parks and plan.model_path is not None and os.path.isdir(plan.model_path):
            from healthchecks.hydration import Hydration

            hydration = Hydration(plan.model_path, settings.park_seconds)
        watchers.append(StartupDeadline(health, probes.startup_seconds, hydration=hydration, log=log))
    if (forward := probes.forward) is not None:
        from healthchecks.canary import engine_api_key
        from healthchecks.forward import ForwardWatcher

        def serving() -> bool:
            return health.started_at is not None and health.phase != STOPPING

        # The engine's environment as the supervisor spawns it: the pod's, then the plan's.
        key = engine_api_key(forward.canary, {**os.environ, **plan.engine.env})
        readers = []
        if probes.kv_transfer:
            from healthchecks.kv_transfer import KvTransferRelay

            readers.append(KvTransferRelay(probes.kv_transfer, plan.role.pool, forward.role))
        interval, timeout = settings.check_interval, settings.check_timeout
        watchers.append(ForwardWatcher(forward, serving, interval, timeout, log, key, readers=readers))
        if probes.pd_canary is not None:
            from healthchecks.pd_canary import PdCanaryWatcher

            watchers.append(
                PdCanaryWatcher(probes.pd_canary, forward, serving, interval, log, key, plan.role.pool)
            )
    if probes.peers:
        from healthchecks.peers import PeerWatcher

        watchers.append(PeerWatcher(probes, settings.check_interval, settings.check_timeout, log))
    master = plan.needs.store_master
    if master is not None and master.metadata_server is not None:
        from healthchecks.store_master import StoreMasterWatcher

        marker = f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"  # this container's life
        watchers.append(
            StoreMasterWatcher(master, marker, settings.check_interval, settings.check_timeout, log)
        )
    return tuple(watchers)
