"""The one reader of an engine's own /metrics (Prometheus text): forward progress sums its token
counters, the KV-event watcher its served requests. Summing is pure; reading goes through the shared
HTTP helper."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import Metric

from healthchecks.http import NoAnswer, http_get

if TYPE_CHECKING:
    from aiohttp import ClientSession


class MetricsReader(Protocol):
    """Another use of the samples the forward watch reads from each API server's /metrics (one GET
    serves all): it names its sample selectors, takes their values per source after every answered
    read, and exports what it took. It judges nothing (healthchecks/kv_transfer.py)."""

    selectors: tuple[str, ...]

    def take(self, source: str, values: tuple[float | None, ...]) -> None:
        """One value per selector (None: not exposed), as the source's latest answered read said."""

    def metrics(self) -> Iterable[Metric]: ...


def counter_sum(text: str, names: tuple[str, ...]) -> float | None:
    """The sum of the named samples over all their label sets; None when none is exposed. Names are
    sample names (`vllm:request_success_total`), so `_created` samples and comments never count; a
    name may select label values: `sglang:realtime_tokens_total{mode="decode"}` sums only the samples
    whose labels hold `mode="decode"`."""
    wanted: dict[str, list[tuple[str, ...]]] = {}
    for selector in names:
        name, _, labels = selector.partition("{")
        wanted.setdefault(name, []).append(tuple(filter(None, labels.rstrip("}").split(","))))
    prefixes = tuple(wanted)
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        selectors = wanted.get(line.split("{", 1)[0].split(" ", 1)[0])
        if selectors is None:
            continue
        labels = line.split("}", 1)[0] if "{" in line else ""
        if not any(all(pair in labels for pair in pairs) for pairs in selectors):
            continue
        try:
            total += float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        found = True
    return total if found else None


async def read_counters(
    session: ClientSession, host: str, port: int, names: tuple[str, ...], timeout: float
) -> tuple[float | None, str | None]:
    """(the counters' sum or None when none is exposed, None) when /metrics answers 200;
    (None, why not) otherwise."""
    sums, failed = await read_sums(session, host, port, (names,), timeout)
    return sums[0], failed


async def read_sums(
    session: ClientSession, host: str, port: int, groups: tuple[tuple[str, ...], ...], timeout: float
) -> tuple[tuple[float | None, ...], str | None]:
    """One read of /metrics, one sum per group of sample names (None: none exposed): (sums, None)
    when it answers 200; (all None, why not) otherwise."""
    where = f"[{host}]" if ":" in host else host
    try:
        status, text = await http_get(session, f"http://{where}:{port}/metrics", timeout, read=True)
    except NoAnswer as exc:
        return (None,) * len(groups), f"GET /metrics: {exc}"
    if status != 200:
        return (None,) * len(groups), f"GET /metrics {status}"
    return tuple(counter_sum(text, names) for names in groups), None
