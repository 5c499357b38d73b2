"""KV-event watcher benchmark: how fast the launcher's watcher drains a publisher flooding vLLM-format
batches, against a plain pyzmq SUB loop on the same stream, and its CPU per batch at steady rates
(results: bench/results/kvevents.md).

- publisher: a STAND-IN for vLLM's ZmqEventPublisher (its own process): 3 frames, 8-byte sequence,
  MessagePack [ts, events, rank], EVENTS BlockStored per batch, sent as fast as pyzmq can, or paced
- plain loop: `recv_multipart()`, `msgpack.unpackb`, count the events: the least a subscriber does
  to count events (a receive-only loop is printed too, as the transport's ceiling)
- watcher: healthchecks.kvevents.watcher.KvEventWatcher as the launcher runs it (decoding, counting, sequence
  tracking); everything the publisher sent must be either received or counted missing: a silent drop
  is a batch in neither
- steady rates: RATES batches/s; CPU is the subscriber process's own (all its threads, ZMQ's I/O
  thread included) from its first batch to its last, per batch and as a share of one core

    .venv/bin/python bench/kvevents_bench.py [--batches 200000] [--rounds 2] [--seconds 10]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.ports import free_port  # noqa: E402

EVENTS = 4  # BlockStored per batch, 32 token ids each
RATES = (200, 2000)  # batches/s: a busy engine publishes about one per scheduler step
CPU_GOAL = 0.02  # of a core, at RATES[0]
QUIET = 1.5  # seconds without a batch: the publisher is done


@dataclass
class Run:
    sent: int
    received: int
    missed: int  # counted missing by the watcher (0 for the plain loops)
    counted: int  # batches received between the two samples below
    span: float  # seconds between them
    cpu: float  # the subscriber's CPU seconds between them

    @property
    def silent_drops(self) -> int:
        return self.sent - self.received - self.missed

    @property
    def events_per_s(self) -> float:
        return self.counted * EVENTS / self.span


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


def plain_loop(port: int, started: Any, decode: bool = True) -> tuple[int, int, int, float, float]:
    """The least a subscriber must do to count events: receive, unpack, count (decode=False: only
    receive, the transport's own ceiling)."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    sub.setsockopt(zmq.RCVTIMEO, int(QUIET * 1000))
    started.set()
    received, events = 0, 0
    first = last = (0.0, 0.0)  # (wall, cpu) at the first and the latest batch
    while True:
        try:
            frames = sub.recv_multipart()
        except zmq.Again:
            break
        if decode:
            events += len(msgpack.unpackb(frames[2])[1])
        last = (time.perf_counter(), time.process_time())
        first = first if received else last
        received += 1
    sub.close(0)
    ctx.term()
    return received, 0, received - 1, last[0] - first[0], last[1] - first[1]


def watcher_run(port: int, started: Any, poll: float) -> tuple[int, int, int, float, float]:
    """The watcher as the launcher runs it, sampled every `poll` seconds (this sampling loop's own
    CPU is counted too: poll rarely when CPU is what is measured)."""
    import structlog

    from healthchecks.kvevents.watcher import KvEventWatcher
    from launcher.contract.plan import KvEventSource, KvEventsWatch

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    watch = KvEventsWatch((KvEventSource(0, port, None, free_port()),), silence_seconds=600)
    watcher = KvEventWatcher(watch, structlog.get_logger())
    stats = watcher.state.ranks[0]
    samples: list[tuple[int, float, float]] = []  # (batches, wall, cpu) at the first and latest progress

    async def main() -> None:
        task = asyncio.create_task(watcher.run())
        await asyncio.sleep(0.3)
        started.set()
        quiet_since = time.perf_counter()
        while time.perf_counter() - quiet_since < QUIET:
            await asyncio.sleep(poll)
            if stats.batches != (samples[-1][0] if samples else 0):
                quiet_since = time.perf_counter()
                samples[1:] = [(stats.batches, quiet_since, time.process_time())]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    (n0, wall0, cpu0), (n1, wall1, cpu1) = samples[0], samples[-1]
    return stats.batches, stats.missed, n1 - n0, wall1 - wall0, cpu1 - cpu0


def run(kind: str, batches: int, rate: float | None = None) -> Run:
    port = free_port()
    started = multiprocessing.Event()
    pub = multiprocessing.Process(target=publisher, args=(port, batches, rate, started))
    pub.start()
    if kind == "watcher":
        result = watcher_run(port, started, poll=0.02 if rate is None else 0.25)
    else:
        result = plain_loop(port, started, decode=kind == "plain")
    pub.join()
    return Run(batches, *result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200_000, help="batches per flood round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="per steady-rate run")
    ns = parser.parse_args()
    flood: dict[str, list[Run]] = {"recv-only": [], "plain": [], "watcher": []}
    for _ in range(ns.rounds):  # alternate, so all see the same machine
        for kind, runs in flood.items():
            runs.append(run(kind, ns.batches))
    steady = {
        (kind, rate): run(kind, int(rate * ns.seconds), rate=rate)
        for rate in RATES
        for kind in ("plain", "watcher")
    }
    rate = {kind: statistics.median(r.events_per_s for r in runs) for kind, runs in flood.items()}
    cpu = {kind: statistics.median(1e6 * r.cpu / r.counted for r in runs) for kind, runs in flood.items()}

    def rounds(kind: str) -> str:
        return ", ".join(f"{r.events_per_s / 1000:,.0f} k" for r in flood[kind])

    plain, watcher = rate["plain"], rate["watcher"]
    watcher_runs = flood["watcher"] + [r for (kind, _), r in steady.items() if kind == "watcher"]
    silent = [r.silent_drops for r in watcher_runs]
    lines = [
        f"# KV-event watcher benchmark ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})",
        "",
        f"STAND-IN publisher in vLLM's wire format, {EVENTS} BlockStored per batch (32 token ids each); "
        f"{ns.rounds} alternating flood rounds of {ns.batches:,} batches each (medians), then "
        f"{ns.seconds:g} s at each steady rate; all in one run (`python bench/kvevents_bench.py`).",
        "",
        "| measure | value | goal |",
        "|---|---|---|",
        *(
            f"| {what} | {rate[kind]:,.0f} events/s ({rounds(kind)}); {cpu[kind]:.1f} µs CPU per batch | |"
            for kind, what in (
                ("recv-only", "pyzmq SUB loop, receive only (the transport's ceiling)"),
                ("plain", "plain pyzmq SUB loop: receive, msgpack-unpack, count events"),
                ("watcher", "watcher drains (decode and validate, count, track sequence)"),
            )
        ),
        f"| watcher / plain | {watcher / plain:.0%} "
        f"| ≥ 90 %: {'met' if watcher >= 0.9 * plain else 'NOT MET'} |",
        f"| silent drops (sent - received - counted missing), per watcher run | {silent} | 0: "
        f"{'met' if not any(silent) else 'NOT MET'} |",
    ]
    for (kind, r), result in steady.items():
        share = result.cpu / result.span
        goal = ""
        if kind == "watcher" and r == RATES[0]:
            goal = f"≤ {CPU_GOAL:.0%} of a core: {'met' if share <= CPU_GOAL else 'NOT MET'}"
        lines.append(
            f"| {kind} CPU at {r:,} batches/s ({result.counted / result.span:,.0f} achieved) | "
            f"{100 * share:.1f} % of a core, {1e6 * result.cpu / result.counted:.0f} µs per batch "
            f"({result.received:,} received, {result.missed} missed) | {goal} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    out = REPO / "bench" / "results" / "kvevents.md"
    out.write_text(text)
    print(f"written to {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
