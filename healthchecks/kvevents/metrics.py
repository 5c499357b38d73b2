"""The KV-event watcher's metric families (watcher.py), read from its state at scrape time; declared
in healthchecks/metrics.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import Metric

from healthchecks.kvevents.stats import WatcherState
from healthchecks.kvevents.wire import EVENT_TYPES
from healthchecks.metrics import (
    KV_CACHE_IDENTITY,
    KV_EVENT_BLOCK_SIZE,
    KV_EVENT_BLOCK_SIZE_MISMATCH,
    KV_EVENT_COUNTERS,
    KV_EVENT_LAST_BATCH,
    KV_EVENT_MALFORMED,
    KV_EVENT_SILENT,
    KV_EVENTS,
    wall_time,
)
from launcher.contract.plan import KvIdentity


def kv_event_metrics(state: WatcherState, identity: KvIdentity | None = None) -> Iterator[Metric]:
    """identity: the plan's (KvEventsWatch.identity), exported beside the block size events carry."""
    events = KV_EVENTS.family()
    counters = {name: spec.family() for name, spec in KV_EVENT_COUNTERS.items()}
    last_batch, silent = KV_EVENT_LAST_BATCH.family(), KV_EVENT_SILENT.family()
    mismatch = KV_EVENT_BLOCK_SIZE_MISMATCH.family()
    block_size = KV_EVENT_BLOCK_SIZE.family()
    now = time.monotonic()
    for number, stats in state.ranks.items():
        label = [str(number)]
        for kind in EVENT_TYPES:
            events.add_metric([str(number), kind], stats.events[kind])
        for name, value in (
            ("batches", stats.batches), ("gaps", stats.gaps), ("batches_missed", stats.missed),
            ("batches_recovered", stats.recovered), ("batches_lost", stats.lost),
            ("publisher_resets", stats.resets),
        ):  # fmt: skip
            counters[name].add_metric(label, value)
        if stats.last_batch_at is not None:
            last_batch.add_metric(label, wall_time(stats.last_batch_at, now))
        silent.add_metric(label, float(stats.silent))
        mismatch.add_metric(label, float(stats.block_size_mismatch))
        if stats.block_size is not None:
            block_size.add_metric(label, float(stats.block_size))
    malformed = KV_EVENT_MALFORMED.family()
    for kind, count in state.malformed.items():
        malformed.add_metric([kind], count)
    planned = KV_CACHE_IDENTITY.family()
    if identity is not None:
        shown = "" if identity.block_size is None else str(identity.block_size)
        planned.add_metric([identity.model, shown, identity.hash_seed], 1.0)
    yield from (events, *counters.values(), last_batch, silent, mismatch, block_size, planned, malformed)
