"""KV-event watcher benchmark: how fast the launcher's watcher drains a publisher flooding vLLM-format
batches, against a plain pyzmq SUB loop on the same stream, and its CPU at a realistic rate
(results: bench/results/kvevents.md).

- publisher: a STAND-IN for vLLM's ZmqEventPublisher (its own process): 3 frames, 8-byte sequence,
  msgpack [ts, events, rank], EVENTS BlockStored per batch, sent as fast as pyzmq can
- plain loop: `recv_multipart()`, `msgpack.unpackb`, count the events: the least a subscriber does
  to count events (a receive-only loop is printed too, as the transport's ceiling)
- watcher: healthchecks.kvevents.KvEventWatcher as the launcher runs it (decoding, counting, sequence
  tracking); everything the publisher sent must be either received or counted missing: a silent drop
  is a batch in neither
- realistic rate: RATE batches/s for SECONDS; the watcher process's CPU over that time

    .venv/bin/python bench/kvevents_bench.py [--batches 200000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.pods import free_port  # noqa: E402

EVENTS = 4  # BlockStored per batch, 32 token ids each
RATE = 200  # batches/s a busy prefill engine publishes (one per scheduler step)
SECONDS = 10.0


def publisher(port: int, batches: int, rate: float | None, started: Any) -> None:
    """STAND-IN publisher with vLLM's wire format; rate None: as fast as it can."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 100_000)  # vLLM's default hwm
    pub.bind(f"tcp://127.0.0.1:{port}")
    started.wait(10)  # the subscriber is connected
    time.sleep(0.5)
    topic = b"kv@127.0.0.1:8000@bench"
    events = [
        {"type": "BlockStored", "block_hashes": [2**63 + i], "parent_block_hash": None,
         "token_ids": list(range(i * 32, i * 32 + 32)), "block_size": 32, "lora_id": None, "medium": "GPU",
         "lora_name": None}
        for i in range(EVENTS)
    ]  # fmt: skip
    payload = msgpack.packb([time.time(), events, 0])
    began = time.perf_counter()
    for seq in range(batches):
        pub.send_multipart([topic, seq.to_bytes(8, "big"), payload])
        if rate is not None:
            delay = began + (seq + 1) / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    time.sleep(2)  # let the last ones drain
    pub.close(linger=2000)
    ctx.term()


def plain_loop(port: int, started: Any, decode: bool = True) -> tuple[int, float]:
    """The least a subscriber must do to count events: receive, unpack, count (decode=False: only
    receive, the transport's own ceiling)."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    sub.setsockopt(zmq.RCVTIMEO, 1500)
    started.set()
    received, events, first, last = 0, 0, 0.0, 0.0
    while True:
        try:
            frames = sub.recv_multipart()
        except zmq.Again:
            break
        if decode:
            events += len(msgpack.unpackb(frames[2])[1])
        last = time.perf_counter()
        first = first or last
        received += 1
    sub.close(0)
    ctx.term()
    return received, last - first


def watcher_run(port: int, started: Any) -> tuple[int, float, int, int]:
    import structlog

    from healthchecks.kvevents import KvEventWatcher
    from launcher.plan import KvEventSource, KvEventsWatch

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    watch = KvEventsWatch((KvEventSource(0, port, None, free_port()),), silence_seconds=600)
    watcher = KvEventWatcher(watch, structlog.get_logger())
    stats = watcher.state.ranks[0]
    times: list[float] = []

    async def main() -> None:
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(0.3)
        started.set()
        seen, quiet_since = -1, time.perf_counter()
        while time.perf_counter() - quiet_since < 1.5:
            await asyncio.sleep(0.05)
            if stats.batches != seen:
                seen, quiet_since = stats.batches, time.perf_counter()
                if not times:
                    times.append(quiet_since)
                times[1:] = [quiet_since]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return stats.batches, span, stats.missed, stats.events["BlockStored"]


def run_round(kind: str, batches: int, rate: float | None = None) -> dict[str, Any]:
    port = free_port()
    started = multiprocessing.Event()
    pub = multiprocessing.Process(target=publisher, args=(port, batches, rate, started))
    pub.start()
    cpu_before = os.times()
    if kind in ("plain", "recv-only"):
        received, span = plain_loop(port, started, decode=kind == "plain")
        missed = 0
    else:
        received, span, missed, _ = watcher_run(port, started)
    cpu_after = os.times()
    pub.join()
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    return {"received": received, "span": span, "missed": missed, "cpu": cpu, "sent": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200_000, help="batches per flood round")
    parser.add_argument("--rounds", type=int, default=2)
    ns = parser.parse_args()
    rates: dict[str, list[float]] = {"recv-only": [], "plain": [], "watcher": []}
    silent: list[int] = []
    for _ in range(ns.rounds):  # alternate, so all see the same machine
        for kind in rates:
            r = run_round(kind, ns.batches)
            rates[kind].append(r["received"] * EVENTS / r["span"])
            if kind == "watcher":
                silent.append(r["sent"] - r["received"] - r["missed"])
    realistic = run_round("watcher", int(RATE * SECONDS), rate=RATE)
    plain, watcher = statistics.median(rates["plain"]), statistics.median(rates["watcher"])
    lines = [
        f"# KV-event watcher benchmark ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})",
        "",
        f"STAND-IN publisher in vLLM's wire format, {EVENTS} BlockStored per batch; {ns.rounds} alternating "
        f"flood rounds of {ns.batches} batches each; medians.",
        "",
        "| measure | value | goal |",
        "|---|---|---|",
        f"| pyzmq SUB loop, receive only (the transport's ceiling) | "
        f"{statistics.median(rates['recv-only']):,.0f} events/s | |",
        f"| plain pyzmq SUB loop: receive, msgpack-unpack, count events | {plain:,.0f} events/s | |",
        f"| watcher drains (decode, count, track sequence) | {watcher:,.0f} events/s | |",
        f"| watcher / plain | {watcher / plain:.0%} "
        f"| ≥ 90 %: {'met' if watcher >= 0.9 * plain else 'NOT MET'} |",
        f"| silent drops (sent - received - counted missing), per round | {silent} | 0: "
        f"{'met' if not any(silent) else 'NOT MET'} |",
        f"| watcher CPU at {RATE} batches/s ({RATE * EVENTS} events/s) for {SECONDS:g} s | "
        f"{100 * realistic['cpu'] / SECONDS:.1f} % of a core ({realistic['received']} received, "
        f"{realistic['missed']} missed) | |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = REPO / "bench" / "results" / "kvevents.md"
    out.write_text(text)
    print(f"written to {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
