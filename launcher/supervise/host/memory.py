"""Does what the plan allocates on the host fit the container's memory limit, and what it registers
for RDMA fit RLIMIT_MEMLOCK? Mooncake registers its segment and buffer with ibv_reg_mr, which fails
past the memlock limit unless the process holds CAP_IPC_LOCK (kvcache-ai/Mooncake #1382, #1405, #1627)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from launcher.contract.errors import Problem
from launcher.contract.plan import Plan

CAP_IPC_LOCK = 14
_UNLIMITED_V1 = 1 << 62  # cgroup v1 reports "no limit" as a page-rounded LONG_MAX


def human(size: int) -> str:
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"


def cgroup_memory_limit(proc: str = "/proc/self") -> tuple[int | None, str]:
    """The tightest memory limit on this process's cgroup and its ancestors (v2 memory.max, v1
    memory.limit_in_bytes), and the file that sets it."""
    best: tuple[int | None, str] = (None, "no cgroup memory limit")
    for directory, name in _cgroup_dirs(proc):
        path = directory
        while True:
            limit = _read_limit(path / name)
            if limit is not None and (best[0] is None or limit < best[0]):
                best = (limit, str(path / name))
            if path == path.parent or not (path.parent / name).exists():
                break
            path = path.parent
    return best


def _cgroup_dirs(proc: str) -> list[tuple[Path, str]]:
    """(this process's cgroup directory, the limit file name) for the v2 and the v1 memory hierarchy."""
    try:
        groups = Path(f"{proc}/cgroup").read_text().splitlines()
        mounts = Path(f"{proc}/mountinfo").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in mounts:
        head, _, tail = line.partition(" - ")
        fields, (fstype, _source, options) = head.split(), ([*tail.split(), "", "", ""])[:3]
        root, mountpoint = fields[3], fields[4]
        if fstype == "cgroup2":
            wanted, name = "0::", "memory.max"
        elif fstype == "cgroup" and "memory" in options.split(","):
            wanted, name = "memory", "memory.limit_in_bytes"
        else:
            continue
        for group in groups:
            hid, controllers, path = ([*group.split(":", 2), "", ""])[:3]
            if (wanted == "0::" and hid == "0" and controllers == "") or wanted in controllers.split(","):
                relative = path[len(root) :] if path.startswith(root) and root != "/" else path
                out.append((Path(mountpoint) / relative.lstrip("/"), name))
    return out


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max" or not text.isdigit() or int(text) >= _UNLIMITED_V1:
        return None
    return int(text)


def has_cap_ipc_lock(proc: str = "/proc/self", capability_set: str = "CapEff") -> bool:
    """CAP_IPC_LOCK in one of the process's capability sets (CapEff: in force; CapBnd: grantable)."""
    try:
        for line in Path(f"{proc}/status").read_text().splitlines():
            if line.startswith(f"{capability_set}:"):
                return bool(int(line.split()[1], 16) >> CAP_IPC_LOCK & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _memlock_problem(soft: int, hard: int, pinned: int) -> Problem:
    limit = f"RLIMIT_MEMLOCK is {human(soft)} (hard {human(hard)})"
    need = f"each engine process registers {human(pinned)} for RDMA (protocol rdma)"
    uid = os.geteuid()
    if uid != 0 and has_cap_ipc_lock(capability_set="CapBnd"):
        # kubernetes/kubernetes#56374: `capabilities.add` reaches a non-root container's bounding
        # set only; without ambient capabilities no process of it ever holds the capability.
        return Problem(
            "CAP_IPC_LOCK",
            f"is in the container's bounding set (securityContext.capabilities.add) but not in the "
            f"effective set, as the container runs as non-root user {uid} (kubernetes/kubernetes#56374); "
            f"{limit} but {need}",
            "run the container as root (securityContext.runAsUser: 0), or give the binary that "
            "registers the memory file capabilities in the image (setcap cap_ipc_lock+ep BINARY) and "
            "mark this check advisory (host.advisory: [memlock]), as the launcher cannot hold them",
        )
    return Problem(
        "RLIMIT_MEMLOCK",
        f"is {human(soft)} (hard {human(hard)}) but {need} and the container lacks CAP_IPC_LOCK",
        "add IPC_LOCK to the container's securityContext.capabilities, or raise the "
        "memlock ulimit of the container runtime to unlimited",
    )


def check_memory(plan: Plan) -> list[tuple[str, Problem]]:
    items = plan.needs.memory
    found: list[tuple[str, Problem]] = []
    need = plan.needs.host_bytes
    parts = " + ".join(f"{i.what} {human(i.size)}" for i in items)
    limit, where = cgroup_memory_limit()
    if limit is not None and need > limit:
        found.append(
            (
                "memory",
                Problem(
                    "container memory limit",
                    f"the plan allocates {human(need)} on the host ({parts}) but the container may use "
                    f"{human(limit)} ({where})",
                    f"raise the container's memory limit to at least {human(need)}, or lower "
                    f"global_segment_size / host.engine_memory in recipe pool {plan.role.pool}",
                ),
            )
        )
    pinned = plan.needs.pinned_per_process
    if pinned and not has_cap_ipc_lock():
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        if soft != resource.RLIM_INFINITY and soft < pinned:
            if hard == resource.RLIM_INFINITY or hard >= pinned:
                # Raise our soft limit to the hard one: the engine inherits it and never has to.
                resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
            else:
                found.append(("memlock", _memlock_problem(soft, hard, pinned)))
    return found
