"""The KV-transfer relay: the engine connector's own counters (failed NIXL transfers, Mooncake store
operations, connector prefix-cache hits: the plan's Probes.kv_transfer) relayed into the launcher's
/metrics by name, with the pod's pool and P/D role, so one PodMonitor sees them beside the launcher's
own. A reader, never a watcher: it has no loop of its own and judges nothing; it takes its counters
from the forward watch's /metrics reads (one GET per API server and check interval serves both).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from healthchecks.metrics import ENGINE_KV_TRANSFER


class KvTransferRelay:
    """A MetricsReader (healthchecks/engine_metrics.py) of the connector's counters."""

    def __init__(self, counters: tuple[str, ...], pool: str, role: str) -> None:
        self.selectors, self.pool, self.role = counters, pool, role
        self.values: dict[
            str, tuple[float | None, ...]
        ] = {}  # by source: as its latest answered /metrics said

    def take(self, source: str, values: tuple[float | None, ...]) -> None:
        self.values[source] = values

    def metrics(self) -> Iterator[Metric]:
        transfer = ENGINE_KV_TRANSFER.family()
        for source, values in self.values.items():
            for counter, value in zip(self.selectors, values, strict=True):
                if value is not None:
                    transfer.add_metric([source, self.pool, self.role, counter], value)
        yield transfer
