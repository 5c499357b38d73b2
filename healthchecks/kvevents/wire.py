"""The KV-event wire format, decoded (pure).

vLLM 0.32, vllm/distributed/kv_events.py: ZmqEventPublisher, EventBatch, KVCacheEvent; SGLang 0.5,
sglang/srt/disaggregation/kv_events.py: three frames, `topic`, an 8-byte big-endian sequence number
(per publisher, from 0) and a MessagePack batch `[ts, events, dp_rank]` (a msgspec Struct with
array_like=True). Events are msgspec-tagged maps whose "type" names the kind (vLLM 0.32 and 0.33,
SGLang), or tagged arrays `[tag, ...]` (older vLLM, still accepted by llm-d's router). Every form is
accepted whatever the engine, so the format is no engine's fact here.

Missed sequence numbers are asked of the replay endpoint (a ROUTER): `[b"", seq8]` from a DEALER; it
answers `[b"", topic, seq8, payload]` per buffered batch and ends with an empty topic and seq 0xff…ff.

Decoding is one typed msgspec call that validates the shape as it goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import msgspec

EVENT_TYPES = ("BlockStored", "BlockRemoved", "AllBlocksCleared")
END_SEQ = 0xFFFFFFFFFFFFFFFF  # the replay endpoint's last answer
REPLAY_TIMEOUT = 5.0  # seconds to wait for one replay answer

BlockHash = int | bytes  # int by default, signed in SGLang, 32 raw bytes when vLLM is told so


class KvEvent(msgspec.Struct, tag=True, frozen=True, gc=False):
    """One KV-cache event; the tag (the class name) is the "type" key. Fields this watcher does not
    use (vLLM's lora_name, extra_keys, group_idx, 0.33's lookahead_token_ids, SGLang's cache_salt)
    are skipped, so an engine adding one changes nothing here."""

    type: ClassVar[str]  # the tag, set below: read per event, so a class attribute, not a property


class BlockStored(KvEvent, frozen=True):
    # In the order of the tagged-array form, which the array subclass below inherits.
    block_hashes: tuple[BlockHash, ...] = ()
    parent_block_hash: BlockHash | None = None
    token_ids: tuple[int, ...] = ()
    block_size: int | None = None
    lora_id: int | None = None
    medium: str | None = None


class BlockRemoved(KvEvent, frozen=True):
    block_hashes: tuple[BlockHash, ...] = ()
    medium: str | None = None


class AllBlocksCleared(KvEvent, frozen=True):
    pass


# Older vLLM: the same events as positional arrays `[tag, field, ...]`. msgspec cannot mix array and
# map forms in one union, so these are a second decoder, tried only when the first one fails.
class _BlockStoredArray(BlockStored, array_like=True, tag="BlockStored", frozen=True):
    pass


class _BlockRemovedArray(BlockRemoved, array_like=True, tag="BlockRemoved", frozen=True):
    pass


class _AllBlocksClearedArray(AllBlocksCleared, array_like=True, tag="AllBlocksCleared", frozen=True):
    pass


for _kind in (BlockStored, BlockRemoved, AllBlocksCleared, _BlockStoredArray, _BlockRemovedArray,
              _AllBlocksClearedArray):  # fmt: skip
    _kind.type = str(_kind.__struct_config__.tag)


class _WireBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    rank: int | None = None  # vLLM's data_parallel_rank, SGLang's attn_dp_rank; absent in older ones


class _WireBatchOfArrays(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[_BlockStoredArray | _BlockRemovedArray | _AllBlocksClearedArray]
    rank: int | None = None


_DECODE = msgspec.msgpack.Decoder(_WireBatch).decode
_DECODE_ARRAYS = msgspec.msgpack.Decoder(_WireBatchOfArrays).decode
_DECODE_ANY = msgspec.msgpack.Decoder().decode


class Batch(NamedTuple):  # a tuple: built ~100k times a second when a publisher floods
    topic: bytes
    seq: int
    ts: float
    rank: int | None
    events: Sequence[KvEvent]


class Malformed(ValueError):
    """One kind per way a message can be wrong; the kind is a metric label."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def decode(frames: list[bytes]) -> Batch:
    """One typed call decodes and validates the usual (map-form) batch; the tagged-array form, and
    which kind of wrong a bad message is, are worked out only when that call fails."""
    if len(frames) != 3:
        raise Malformed("frames", f"{len(frames)} frames, expected 3 (topic, seq, payload)")
    topic, seq_bytes, payload = frames
    if len(seq_bytes) != 8:
        raise Malformed("sequence", f"sequence frame of {len(seq_bytes)} bytes, expected 8")
    try:
        body: _WireBatch | _WireBatchOfArrays = _DECODE(payload)
    except msgspec.ValidationError as exc:
        try:
            body = _DECODE_ARRAYS(payload)
        except msgspec.ValidationError as array_exc:
            raise _malformed(payload, exc, array_exc) from None
    except msgspec.DecodeError as exc:
        raise Malformed("msgpack", f"payload is not MessagePack ({exc})") from None
    return Batch(topic, int.from_bytes(seq_bytes, "big"), body.ts, body.rank, body.events)


def _malformed(payload: bytes, as_maps: Exception, as_arrays: Exception) -> Malformed:
    """Which kind of wrong: told from the payload's generic shape (the slow path, for bad messages
    only), with the typed decoder's own account of where it broke as the detail."""
    try:
        body = _DECODE_ANY(payload)
    except msgspec.DecodeError as exc:  # well-formed up to where the typed decoder stopped
        return Malformed("msgpack", f"payload is not MessagePack ({exc})")
    if type(body) is not list or len(body) < 2 or type(body[1]) is not list:
        return Malformed("batch", f"payload is not [ts, events, dp_rank]: {as_maps}")
    if type(body[0]) not in (int, float) or not (len(body) == 2 or body[2] is None or type(body[2]) is int):
        return Malformed("batch", f"payload is not [ts, events, dp_rank]: {as_maps}")
    if any(type(raw) is list for raw in body[1]):
        as_maps = as_arrays
    for raw in body[1]:
        if type(raw) is dict:
            kind = raw.get("type")
        elif type(raw) is list and raw and type(raw[0]) is str:
            kind = raw[0]
        else:
            return Malformed("event", "an event is neither a map with 'type' nor a tagged array")
        if kind not in EVENT_TYPES:
            return Malformed("event-type", f"unknown event type {str(kind)[:40]!r}")
    return Malformed("event", str(as_maps))  # a known kind with a field of the wrong type
