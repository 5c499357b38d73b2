"""The life cycle of one supervised process: an explicit state and the moves allowed between them.

The supervisor (launcher/supervise/supervisor.py) moves each process through these states; /metrics
shows the current one (`llmd_launcher_process_state`). A move the table does not allow is a bug in
the supervisor, so it raises instead of being ignored.
"""

from __future__ import annotations

import enum


class Lifecycle(enum.Enum):
    STARTING = "starting"  # not spawned yet
    RUNNING = "running"  # spawned, not reaped
    BACKOFF = "backoff"  # a sidecar that exited, waiting for its restart
    STOPPING = "stopping"  # the pod's stop began while it ran: signalled or about to be
    EXITED = "exited"  # gone (or never started) as part of the pod's stop
    FATAL = "fatal"  # its exit, or its failure to start, ended the pod


ALLOWED: dict[Lifecycle, frozenset[Lifecycle]] = {
    Lifecycle.STARTING: frozenset({Lifecycle.RUNNING, Lifecycle.BACKOFF, Lifecycle.FATAL, Lifecycle.EXITED}),
    Lifecycle.RUNNING: frozenset({Lifecycle.BACKOFF, Lifecycle.STOPPING, Lifecycle.FATAL}),
    # A restart that fails to spawn waits again (BACKOFF -> BACKOFF).
    Lifecycle.BACKOFF: frozenset({Lifecycle.RUNNING, Lifecycle.BACKOFF, Lifecycle.FATAL, Lifecycle.EXITED}),
    Lifecycle.STOPPING: frozenset({Lifecycle.EXITED}),
    Lifecycle.EXITED: frozenset(),
    Lifecycle.FATAL: frozenset(),
}


class IllegalTransition(RuntimeError):
    """The supervisor tried a move the life cycle does not allow: a bug, never a user's mistake."""


def move(process: str, current: Lifecycle, target: Lifecycle) -> Lifecycle:
    """`target`, when the table allows the move from `current`; raises IllegalTransition otherwise."""
    if target not in ALLOWED[current]:
        raise IllegalTransition(f"{process}: {current.value} -> {target.value} is not a legal transition")
    return target
