"""Whether the checkpoint is still being copied into the model directory while the engine starts.

A model volume hydrated beside the pod (a node cache filled by another process, a copy into a shared
volume) can pass preflight with every shard already named and sized while bytes still arrive. The
start-up deadline must not count that time: in an LWS group an exit would recreate the whole group,
whose new pods wait for the same copy. So the deadline watcher (healthchecks/deadline.py) parks the
pod while a file of the model directory appears or changes, and until it has been quiet for
QUIET_SECONDS; the engine keeps running meanwhile.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

QUIET_SECONDS = 30.0  # no file appeared or changed for this long: the copy is over
SCAN_EVERY = 5.0  # seconds between two looks at the directory (a stat per file)

Snapshot = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns)


def snapshot(root: str) -> Snapshot:
    """Every file under root with its size and modification time (symlinks followed: a hub cache's
    snapshot links to blobs that grow)."""
    files: Snapshot = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            try:
                stat = os.stat(path)
            except OSError:  # removed meanwhile, or a dangling link to a blob not there yet
                continue
            files[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns)
    return files


def changed_file(before: Snapshot, after: Snapshot) -> str | None:
    """One file that appeared or changed between two looks (the first in name order), if any."""
    return next((name for name in sorted(after) if before.get(name) != after[name]), None)


@dataclass
class Hydration:
    """The model directory's changes, one look per SCAN_EVERY: the first look is the baseline, so a
    directory copied before the pod started never counts as being copied."""

    root: str
    bound: float  # LLMD_PARK_SECONDS: parked this long for the copy, the deadline counts again
    scan: Callable[[str], Snapshot] = snapshot
    quiet_seconds: float = QUIET_SECONDS
    scan_every: float = SCAN_EVERY
    last: Snapshot | None = None
    looked_at: float | None = None
    change: tuple[str, float] | None = None  # the latest file seen changing, and when
    parked_for: float = 0.0  # seconds parked for the copy so far

    def copying(self, now: float) -> str | None:
        """Why start-up waits for the copy now (a file changed within quiet_seconds), or None. Scans
        at most once per scan_every; call it from a thread (it stats every file)."""
        if self.looked_at is None or now - self.looked_at >= self.scan_every:
            files = self.scan(self.root)
            if self.last is not None and (name := changed_file(self.last, files)) is not None:
                self.change = (name, now)
            self.last, self.looked_at = files, now
        if self.change is None or now - self.change[1] >= self.quiet_seconds:
            return None
        name, when = self.change
        return (
            f"model.path: the checkpoint is still being copied ({name} changed {now - when:.0f} s ago); "
            f"start-up waits until no file changed for {self.quiet_seconds:g} s, this time not counted"
        )
