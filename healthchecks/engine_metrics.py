"""The one reader of an engine's own /metrics (Prometheus text): forward progress reads its step
signals and busy gauges, the KV-event watcher its served requests, a MetricsReader what it relays.

Every number is validated before it means anything (issue #40): a sample that is NaN, ±Inf or
negative is no count of anything, so it is "unknown" (never progress, never busy), and each labelled
series is kept apart (Samples.valid), so one series frozen at 1e20 cannot swallow another's step in
a sum. Parsing is pure (prometheus_client's text parser, one wanted line at a time); reading goes
through the shared HTTP helper, at most METRICS_BYTES of body.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from healthchecks.http import NoAnswer, http_get

if TYPE_CHECKING:
    from aiohttp import ClientSession

# An engine's whole /metrics, at most: vLLM 0.32's with every histogram is a few hundred KiB; more is
# not read (the read fails, the signal is unknown).
METRICS_BYTES = 8 * 1024 * 1024
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # the sample name and its labels, sorted


@dataclass(frozen=True)
class Samples:
    """What one read says of a group of sample selectors."""

    valid: dict[SeriesKey, float] = field(default_factory=dict)  # finite, non-negative, by series
    invalid: int = 0  # samples selected that are no count: NaN, ±Inf or negative

    @property
    def exposed(self) -> bool:
        return bool(self.valid) or self.invalid > 0

    @property
    def total(self) -> float | None:
        """The valid samples' sum; None when none is valid (not exposed, or unknown)."""
        return sum(self.valid.values()) if self.valid else None


def _selector(selector: str) -> tuple[str, dict[str, str]]:
    """`name{label="value",...}` -> (name, the labels a sample must hold)."""
    name, _, rest = selector.partition("{")
    labels = {}
    for pair in filter(None, rest.rstrip("}").split(",")):
        key, _, value = pair.partition("=")
        labels[key.strip()] = value.strip().strip('"')
    return name, labels


def select(text: str, selectors: tuple[str, ...]) -> Samples:
    """The samples of the selectors: names are sample names (`vllm:request_success_total`, so
    `_created` samples and comments never count); a name may select label values:
    `sglang:realtime_tokens_total{mode="decode"}` takes only the samples whose labels hold mode="decode"."""
    wanted: dict[str, list[dict[str, str]]] = {}
    for name, labels in map(_selector, selectors):
        wanted.setdefault(name, []).append(labels)
    prefixes = tuple(wanted)
    valid: dict[SeriesKey, float] = {}
    invalid = 0
    for line in text.splitlines():
        if not line.startswith(prefixes) or line.split("{", 1)[0].split(" ", 1)[0] not in wanted:
            continue
        try:
            sample = next(iter(text_string_to_metric_families(line))).samples[0]
        except (ValueError, IndexError, StopIteration, KeyError, TypeError):  # no sample: not exposed
            continue
        if not any(all(sample.labels.get(k) == v for k, v in want.items()) for want in wanted[sample.name]):
            continue
        if math.isfinite(sample.value) and sample.value >= 0:
            valid[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        else:
            invalid += 1
    return Samples(valid, invalid)


def counter_sum(text: str, names: tuple[str, ...]) -> float | None:
    """The sum of the named samples' valid values over all their label sets; None when none is."""
    return select(text, names).total


class MetricsReader(Protocol):
    """Another use of the samples the forward watch reads from each API server's /metrics (one GET
    serves all): it names its sample selectors, takes their sums per source after every answered
    read, and exports what it took. It judges nothing (healthchecks/kv_transfer.py)."""

    selectors: tuple[str, ...]

    def take(self, source: str, values: tuple[float | None, ...]) -> None:
        """One value per selector (None: not exposed, or no valid sample), as the latest read said."""

    def metrics(self) -> Iterable[Metric]: ...


async def read_counters(
    session: ClientSession, host: str, port: int, names: tuple[str, ...], timeout: float
) -> tuple[float | None, str | None]:
    """(the counters' sum or None when none is exposed, None) when /metrics answers 200;
    (None, why not) otherwise."""
    samples, failed = await read_samples(session, host, port, (names,), timeout)
    return samples[0].total, failed


async def read_samples(
    session: ClientSession, host: str, port: int, groups: tuple[tuple[str, ...], ...], timeout: float
) -> tuple[tuple[Samples, ...], str | None]:
    """One read of /metrics, the samples of each group of selectors: (samples, None) when it answers
    200; (nothing in any group, why not) otherwise."""
    where = f"[{host}]" if ":" in host else host
    nothing = (Samples(),) * len(groups)
    try:
        status, text = await http_get(session, f"http://{where}:{port}/metrics", timeout, read=METRICS_BYTES)
    except NoAnswer as exc:
        return nothing, f"GET /metrics: {exc}"
    if status != 200:
        return nothing, f"GET /metrics {status}"
    return tuple(select(text, names) for names in groups), None
