"""Is /dev/shm shared with another pod of this LWS group that has a network of its own?

SGLang 0.5.23 decides that two TP ranks are on the same node by opening rank 0's /dev/shm segment:
pods that share /dev/shm (hostIPC, or one hostPath) without sharing the network (hostNetwork) pass
that test, take the same-node path, and hang forever in TP init. Nothing in the manifest the
launcher sees says so (`plan --group` reads env, not hostIPC), so each pod leaves a marker in its shm
directory: a file per group member naming the LWS group, its worker index and its POD_IP, flock-held
while the launcher lives. A live marker of the same group with another POD_IP proves the directory
is shared across network namespaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

MARKER_PREFIX = "llm-d-launcher-member-"


@dataclass(frozen=True)
class GroupMember:
    """Another live pod of the group whose marker is in the same directory."""

    worker_index: str
    pod_ip: str


def claim_membership(
    shm_dir: str, group: str, worker_index: int, pod_ip: str
) -> tuple[int, list[GroupMember]]:
    """Write and lock this pod's marker (the returned descriptor holds the lock: keep it open while the
    pod runs), then list the group's other live members in the directory with another POD_IP."""
    tag = hashlib.sha256(group.encode()).hexdigest()[:16]
    directory = Path(shm_dir)
    mine = directory / f"{MARKER_PREFIX}{tag}-{worker_index}"
    # Written and locked under a temporary name, then renamed: a reader never sees it half-written.
    draft = directory / f".{mine.name}.{os.getpid()}"
    fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, pod_ip.encode())
        os.rename(draft, mine)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            draft.unlink()
        raise
    others = []
    for path in sorted(directory.glob(f"{MARKER_PREFIX}{tag}-*")):
        if path == mine:
            continue
        member = _live_member(path)
        if member is not None and member.pod_ip != pod_ip:
            others.append(member)
    return fd, others


def _live_member(path: Path) -> GroupMember | None:
    """The member a marker names while its launcher holds it; None (and the file removed) when stale."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # removed meanwhile
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held: its launcher runs
            return GroupMember(path.name.rsplit("-", 1)[1], os.read(fd, 256).decode(errors="replace"))
        with contextlib.suppress(OSError):
            path.unlink()  # a launcher that ended left it
        return None
    finally:
        os.close(fd)
