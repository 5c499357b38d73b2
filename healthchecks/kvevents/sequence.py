"""Sequence tracking (pure): what each arriving sequence number of one publisher means."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class Gap:
    first: int  # the missing sequence numbers are first..last
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1


class Seen(enum.Enum):
    NEXT = "next in line"
    RESET = "the publisher restarted"
    OLD = "already seen"


class SequenceTracker:
    """What each arriving sequence number means: next in line, a gap, a restarted publisher, or old."""

    def __init__(self) -> None:
        self.expected: int | None = None  # None: nothing seen yet

    def see(self, seq: int) -> Gap | Seen:
        expected = self.expected
        if seq == expected:
            self.expected = seq + 1
            return Seen.NEXT
        if expected is None:
            self.expected = seq + 1
            return Gap(0, seq - 1) if seq > 0 else Seen.NEXT  # batches published before we connected
        if seq > expected:
            self.expected = seq + 1
            return Gap(expected, seq - 1)
        if seq == 0:  # a new publisher (the engine restarted) counts from 0 again
            self.expected = 1
            return Seen.RESET
        return Seen.OLD  # already seen (replayed twice, or a stale duplicate)
