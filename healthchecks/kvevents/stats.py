"""What the KV-event watcher counts, per rank and in all: data only, read by the watcher (which
updates it), its metrics (healthchecks/kvevents/metrics.py) and /kvevents."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from healthchecks.kvevents.sequence import SequenceTracker
from healthchecks.kvevents.wire import BlockStored
from launcher.contract.plan import KvEventSource

RECENT = 16  # BlockStored events kept for /kvevents


@dataclass
class RankStats:
    source: KvEventSource
    events: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    gaps: int = 0
    missed: int = 0  # batches found missing (sum of gap sizes)
    recovered: int = 0  # of those, delivered by the replay endpoint
    lost: int = 0  # of those, not delivered (replay off, expired or failed)
    resets: int = 0
    last_batch_at: float | None = None  # monotonic
    last_seq: int | None = None
    requests_served: float | None = None  # the engine's count at our latest look (None: not read yet)
    served_since_batch: bool = False  # the engine served a request after our latest batch
    silent: bool = False
    block_size: int | None = None  # the latest BlockStored's block_size
    block_size_mismatch: bool = False  # it differs from the router's blockSizeTokens
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    pending: set[int] = field(default_factory=set)  # missing seqs a replay may still deliver


@dataclass
class WatcherState:
    ranks: dict[int, RankStats]
    malformed: Counter[str] = field(default_factory=Counter)
    recent: deque[tuple[int, int, BlockStored]] = field(
        default_factory=lambda: deque(maxlen=RECENT)
    )  # rank, seq, event

    def as_dict(self, now: float, token_ids: bool = False) -> dict[str, Any]:
        """token_ids: show the recent events' token ids, i.e. recent prompts (LLMD_KV_EVENTS_TOKEN_IDS)."""
        return {
            "ranks": {
                str(rank): {
                    "port": s.source.port,
                    "replay_port": s.source.replay_port,
                    "batches": s.batches,
                    "events": dict(s.events),
                    "gaps": s.gaps,
                    "missed": s.missed,
                    "recovered": s.recovered,
                    "lost": s.lost,
                    "resets": s.resets,
                    "last_seq": s.last_seq,
                    "seconds_since_last_batch": None
                    if s.last_batch_at is None
                    else round(now - s.last_batch_at, 3),
                    "silent": s.silent,
                    "requests_served": s.requests_served,
                    "block_size": s.block_size,
                    "block_size_mismatch": s.block_size_mismatch,
                }
                for rank, s in self.ranks.items()
            },
            "malformed": dict(self.malformed),
            "recent_block_stored": [
                _stored_dict(rank, seq, event, token_ids) for rank, seq, event in list(self.recent)
            ],
        }


def _stored_dict(rank: int, seq: int, event: BlockStored, token_ids: bool) -> dict[str, Any]:
    """Token ids are a prompt's text to anyone with the tokenizer, and /kvevents answers anyone who
    reaches the pod IP: by default only hashes, counts and sizes."""
    shown: dict[str, Any] = {
        "rank": rank,
        "seq": seq,
        "block_hashes": [h if isinstance(h, int) else h.hex() for h in event.block_hashes],
        "tokens": len(event.token_ids),
        "block_size": event.block_size,
    }
    if token_ids:
        shown["token_ids"] = list(event.token_ids)
    return shown
