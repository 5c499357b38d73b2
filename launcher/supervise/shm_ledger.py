"""The ledger of the shared-memory files the launcher's own process tree held: the proof the clean-up
before the next start (preflight.clean_shm) needs. A name matching an engine's pattern is no proof: a
container without our PID namespace, or any program on a host, may own a `psm_*` file nobody holds
right now (a Python SharedMemory created by one process, to be attached by another later).

While the engine runs, the supervisor samples the files its descendants hold open or mapped and adds
them (name and inode) to a ledger kept in the shm directory itself: /dev/shm outlives a container
restart exactly as the files do, which LLMD_RUNTIME_DIR does not. Entries are kept per owner, the
pod's name: it survives a container restart, and a pod sharing the directory (hostIPC) has another,
whose processes this launcher cannot see, so whose entries prove nothing about ours.

A shared directory (hostIPC makes /dev/shm the node's) lets any user create the ledger first: a
ledger is believed only when it is this process's user's and no one else may write it (`ours`), and
a listed file is removed only when it is this user's too (preflight.clean_shm).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

LEDGER_NAME = ".llm-d-launcher-owned.json"  # a dot-name: no engine's segment pattern matches it
LEDGER_MAX_BYTES = 1 << 20  # far above any real ledger (a few hundred names); larger is not ours
FIRST_SAMPLE_AFTER = 2.0  # seconds after spawning: the engine's first segments exist by then
SAMPLE_EVERY = 30.0  # seconds between samples: a segment lives for the engine's life, not seconds


Owners = Mapping[str, Mapping[str, int]]  # owner -> file name -> inode


@dataclass(frozen=True)
class Ledger:
    """What the ledger says: owner -> file name -> inode; `problem` when it could not be read (then
    empty)."""

    owners: dict[str, dict[str, int]]
    problem: str | None = None

    def files(self, pod_name: str | None) -> dict[str, int]:
        return self.owners.get(ledger_owner(pod_name), {})


def ledger_owner(pod_name: str | None) -> str:
    """The pod's name (POD_NAME), else the host's name (a pod's hostname is its name too)."""
    return pod_name or socket.gethostname()


def not_ours(st: os.stat_result) -> str | None:
    """Why a file with this status is not provably this process's own: another user's, or writable
    by its group or by others (then anyone in them may have written it); None when it is ours."""
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by the launcher's uid {os.geteuid()}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def read_ledger(root: Path) -> Ledger:
    """The ledger in root; absent: empty. Unreadable, not a regular file, not ours (`not_ours`), over
    LEDGER_MAX_BYTES or not the expected JSON: empty, with the problem to warn about once."""
    try:
        fd = os.open(root / LEDGER_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return Ledger({})
    except OSError as exc:
        return Ledger({}, f"cannot be opened ({exc.strerror or type(exc).__name__})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Ledger({}, "is not a regular file")
        if (foreign := not_ours(st)) is not None:
            return Ledger({}, foreign)
        data = os.read(fd, LEDGER_MAX_BYTES + 1)
    except OSError as exc:
        return Ledger({}, f"cannot be read ({exc.strerror or type(exc).__name__})")
    finally:
        os.close(fd)
    if len(data) > LEDGER_MAX_BYTES:
        return Ledger({}, f"is larger than {LEDGER_MAX_BYTES} bytes")
    try:
        owners = json.loads(data)["owners"]
    except (ValueError, KeyError, TypeError):
        return Ledger({}, "is not the launcher's JSON")
    if not isinstance(owners, dict) or not all(
        isinstance(files, dict) and all(isinstance(k, str) and type(v) is int for k, v in files.items())
        for files in owners.values()
    ):
        return Ledger({}, "is not the launcher's JSON")
    return Ledger(owners)


def write_ledger(root: Path, owners: Owners) -> None:
    """Atomically (a temporary file renamed over it): a crash mid-write leaves the old ledger."""
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f"{LEDGER_NAME}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(
                {"owners": {o: dict(sorted(f.items())) for o, f in sorted(owners.items()) if f}}, handle
            )
        os.replace(tmp, root / LEDGER_NAME)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def still_there(root: Path, owners: Owners) -> dict[str, dict[str, int]]:
    """The ledger's files that are still there with the same inode, by owner: what is left."""
    left: dict[str, dict[str, int]] = {}
    for owner, files in owners.items():
        for name, inode in files.items():
            with contextlib.suppress(OSError):
                if "/" not in name and (root / name).lstat().st_ino == inode:
                    left.setdefault(owner, {})[name] = inode
    return left


def visible_pids() -> list[str]:
    return list(filter(str.isdigit, os.listdir("/proc")))


def files_held(device: int, pids: Iterable[int | str]) -> set[tuple[int, int]]:
    """(device, inode) of every file on `device` that one of pids holds open (its fd/) or mapped (its
    maps: `address perms offset major:minor inode path`)."""
    used: set[tuple[int, int]] = set()
    dev = f"{os.major(device):02x}:{os.minor(device):02x}"
    spaced = f" {dev} "
    for pid in pids:
        base = f"/proc/{pid}"
        try:
            for fd in os.listdir(f"{base}/fd"):
                with contextlib.suppress(OSError):
                    st = os.stat(f"{base}/fd/{fd}")  # the open file itself, even once unlinked
                    if st.st_dev == device:
                        used.add((st.st_dev, st.st_ino))
            with open(f"{base}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    if spaced not in line:  # most lines: a library or an anonymous region, never split
                        continue
                    fields = line.split(None, 5)
                    if len(fields) >= 5 and fields[3] == dev:
                        used.add((device, int(fields[4])))
        except (OSError, ValueError):  # exited meanwhile, or not ours to inspect (e.g. a sandbox's init)
            continue
    return used


def record_held(
    directory: str, pattern: re.Pattern[str], pids: Iterable[int], pod_name: str | None = None
) -> None:
    """Add to the ledger, as this pod's, the regular files directly in directory, named by pattern,
    that pids hold.
    The ledger is read each time (another launcher sharing the directory may have rewritten it) and
    written only when it gains a file."""
    root = Path(os.path.realpath(directory))
    if not root.is_dir():
        return
    device = root.stat().st_dev
    held = files_held(device, pids)
    if not held:
        return
    ours: dict[str, int] = {}
    with os.scandir(root) as entries:  # the directory's own type and inode: no stat per file
        for entry in entries:
            with contextlib.suppress(OSError):
                if (
                    pattern.fullmatch(entry.name)
                    and entry.is_file(follow_symlinks=False)
                    and (device, entry.inode()) in held
                ):
                    ours[entry.name] = entry.inode()
    ledger = read_ledger(root)
    recorded = ledger.files(pod_name)
    if ours.items() - recorded.items():
        write_ledger(root, {**ledger.owners, ledger_owner(pod_name): {**recorded, **ours}})
