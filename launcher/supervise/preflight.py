"""Checks that run before anything is spawned. Each is bounded in time and fails with one line naming
the setting and the fix (exit 2): a wrong flag found here costs seconds, not an hour of model loading.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from launcher.contract.errors import ConfigError, Problem
from launcher.contract.log import Log
from launcher.contract.plan import Plan, StoreMaster
from launcher.supervise.shm_ledger import (
    LEDGER_NAME,
    files_held,
    read_ledger,
    still_there,
    visible_pids,
    write_ledger,
)
from launcher.supervise.spawn import search_path

if TYPE_CHECKING:
    from launcher.supervise.host import HostReport

T = TypeVar("T")
CHECK_TIMEOUT = 20.0  # seconds any one local check may take
WAIT_LOG_EVERY = 5.0  # seconds between "still waiting" lines


def in_daemon_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """Run blocking work (getaddrinfo, /proc scans) without blocking signals, and without a worker
    thread that would hold up the launcher's exit if the work never returns."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def work() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name=f"preflight-{getattr(fn, '__name__', 'check')}", daemon=True).start()
    return future


def getaddrinfo_ip(name: str) -> str:
    """The first address the system resolver gives (its own RFC 6724 order; IPv6-only clusters work)."""
    infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    return str(infos[0][4][0])


async def resolve_leader(name: str, wait_seconds: float, log: Log) -> str:
    """LWS_LEADER_ADDRESS is a DNS name that resolves only once the leader pod has an IP; ZMQ binds and
    NCCL need the IP. Retry until the bound, saying every few seconds what we wait for."""
    started = time.monotonic()
    last_log = started - WAIT_LOG_EVERY  # the first failure is logged at once
    error = "no answer yet"
    while True:
        remaining = wait_seconds - (time.monotonic() - started)
        if remaining <= 0:
            break
        try:
            ip = await asyncio.wait_for(in_daemon_thread(getaddrinfo_ip, name), timeout=min(remaining, 10.0))
            log.info("leader resolved", leader=name, ip=ip, waited_s=round(time.monotonic() - started, 2))
            return ip
        except (OSError, UnicodeError, asyncio.TimeoutError) as exc:
            error = str(exc) or type(exc).__name__
        now = time.monotonic()
        if now - last_log >= WAIT_LOG_EVERY:
            last_log = now
            log.info(
                "waiting for LWS_LEADER_ADDRESS to resolve",
                leader=name,
                waited_s=round(now - started, 1),
                limit_s=wait_seconds,
                error=error,
            )
        await asyncio.sleep(min(1.0, max(0.0, wait_seconds - (now - started))))
    raise ConfigError.one(
        "LWS_LEADER_ADDRESS",
        f"{name} did not resolve to an IP within {wait_seconds:g} s (last error: {error})",
        "check that the leader pod exists and the LWS headless service publishes it, or raise "
        "LLMD_LEADER_WAIT_SECONDS",
    )


async def wait_for_store_master(
    master: StoreMaster, wait_seconds: float, log: Log, *, once: bool = False
) -> Problem | None:
    """The master's RPC port and metadata server, waited for up to wait_seconds (a Deployment and a
    DaemonSet start in any order), saying every few seconds what is missing. `once`: look one time
    (the recipe made the check advisory)."""
    from launcher.supervise.host.store_master import master_problem

    started = time.monotonic()
    last_log = started - WAIT_LOG_EVERY
    while True:
        try:
            problem = await asyncio.wait_for(in_daemon_thread(master_problem, master, 2.0), timeout=10.0)
        except asyncio.TimeoutError:
            problem = "no answer within 10 s (name resolution or the connection hangs)"
        waited = time.monotonic() - started
        if problem is None:
            log.info("store master reachable", master=master.rpc, waited_s=round(waited, 1))
            return None
        if once or waited >= wait_seconds:
            limit = f"LLMD_STORE_MASTER_WAIT_SECONDS={wait_seconds:g}"
            return Problem(
                master.name, f"{problem} ({'advisory: looked once' if once else limit})", master.fix
            )
        if time.monotonic() - last_log >= WAIT_LOG_EVERY:
            last_log = time.monotonic()
            log.info(
                "waiting for the store master", master=master.rpc, problem=problem, waited_s=round(waited)
            )
        await asyncio.sleep(min(1.0, max(0.0, wait_seconds - waited)))


# ------------------------------------------------------------------ local checks (each returns problems)
def check_ports_free(plan: Plan) -> list[Problem]:
    """Every port the plan listens on must be free; name the process that holds it."""
    import psutil

    wanted = {port.number: (owner, port.name) for owner, port in plan.ports}
    problems = []
    seen: set[int] = set()
    for conn in psutil.net_connections(kind="tcp"):
        port = conn.laddr.port if conn.laddr else None
        if conn.status != psutil.CONN_LISTEN or port not in wanted or port in seen:
            continue
        seen.add(port)
        owner, name = wanted[port]
        problems.append(
            Problem(
                f"port {port}",
                f"{owner}'s {name} port is already in use by {_describe_pid(conn.pid)}",
                f"stop that process, or move {owner}'s {name} port in recipe pool {plan.role.pool}",
            )
        )
    return problems


def listener_of(port: int) -> str:
    """Who listens on a TCP port, for an error message."""
    import psutil

    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                return _describe_pid(conn.pid)
    return "another process"


def _describe_pid(pid: int | None) -> str:
    import psutil

    if pid is None:
        return "a process this user cannot see"
    try:
        proc = psutil.Process(pid)
        cmdline = " ".join(proc.cmdline())[:120] or proc.name()
    except psutil.Error:
        return f"pid {pid}"
    return f"pid {pid} ({cmdline})"


def check_proc(proc: str = "/proc") -> list[Problem]:
    """The launcher tells its own processes (orphans included) from others through /proc, and signals
    them all at a stop. In a PID namespace whose /proc is the host's (`unshare -pf` without
    --mount-proc), this process is pid 1 and every process on the host would look like its child."""
    try:
        seen = os.readlink(f"{proc}/self")
    except OSError as exc:
        return [Problem("/proc", f"cannot be read ({exc.strerror})", "mount proc in the container")]
    if seen != str(os.getpid()):
        return [
            Problem(
                "/proc",
                f"belongs to another PID namespace ({proc}/self is {seen}, this process is {os.getpid()}), "
                "so the launcher could not tell its processes from the host's",
                "mount a proc for this PID namespace (container runtimes do; with unshare, add --mount-proc)",
            )
        ]
    return []


def check_canary_key(plan: Plan, environ: Mapping[str, str]) -> list[Problem]:
    """The key the forward-progress canary sends must fit an HTTP header: Latin-1, no control
    characters (a Secret made from a file keeps its trailing newline). No client could send such a
    key to the engine either. The problem names the variable, never its value."""
    watch = plan.probes.forward
    if watch is None or watch.canary.api_key_env is None:
        return []
    name = watch.canary.api_key_env
    key = {**environ, **plan.engine.env}.get(name) or ""
    try:
        key.encode("latin-1")
        fits = not any(ord(c) < 0x20 or ord(c) == 0x7F for c in key)
    except UnicodeEncodeError:
        fits = False
    if fits:
        return []
    return [
        Problem(
            name,
            "holds a character no HTTP header can carry (a control character such as a trailing newline, "
            "or one outside Latin-1), so neither the canary nor any client can send it",
            f"remove it from {name} (a Secret from a file: create it without the trailing newline, "
            "e.g. `kubectl create secret generic --from-literal`)",
        )
    ]


def check_model(plan: Plan) -> list[Problem]:
    """A local model (an absolute path) must be mounted and hold a config.json; hub ids are left to
    the engine."""
    path = plan.model_path
    if not path or not path.startswith("/"):
        return []
    fix = "mount the model volume there, or fix model.path in the recipe"
    if not Path(path).is_dir():
        return [Problem("model.path", f"{path} does not exist or is not a directory", fix)]
    if not (Path(path) / "config.json").is_file():
        return [Problem("model.path", f"{path} holds no config.json (not a model directory)", fix)]
    return []


def check_binaries(plan: Plan, bin_path: str) -> list[Problem]:
    problems = []
    for process in plan.processes:
        binary = process.argv[0]
        where = search_path(bin_path, dict(process.env))
        if shutil.which(binary, path=where) is None:
            problems.append(
                Problem(
                    f"process {process.name}",
                    f"{binary} is not found or not executable (searched LLMD_BIN_PATH and PATH)",
                    "install it in the image, or put its directory on LLMD_BIN_PATH",
                )
            )
    return problems


def check_runtime_dir(plan: Plan, runtime_dir: str) -> list[Problem]:
    """The plan's files go under LLMD_RUNTIME_DIR; find out now, not after spawning half the pod."""
    if not plan.files:
        return []
    try:
        Path(runtime_dir).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=runtime_dir, prefix=".write-check-"):
            pass
    except OSError as exc:
        return [
            Problem(
                "LLMD_RUNTIME_DIR",
                f"{runtime_dir} is not writable ({exc.strerror or exc})",
                "mount a writable volume (e.g. emptyDir) there, or point LLMD_RUNTIME_DIR elsewhere",
            )
        ]
    return []


# The shared-memory files the engines we start leave behind when they crash, and nothing else: a
# model, a cache or anyone's data in a misconfigured LLMD_SHM_DIR must never match. These are the
# libraries' every engine uses; the engine's own segments come with the plan (HostNeeds.shm_segments).
STALE_SHM = re.compile(
    r"psm_[0-9a-f]{6,}"  # CPython multiprocessing.shared_memory (the engines' shm broadcast, mm utils)
    r"|sem\.mp-\w+"  # CPython multiprocessing semaphores, as glibc's sem_open names them
    r"|torch_\d+_\d+_\d+"  # torch's shared-memory tensors ("/torch_{}_{}_{}" in libtorch_cpu)
    r"|nccl-\w{6}"  # NCCL host buffers (src/misc/shmutils.cc, "/dev/shm/nccl-XXXXXX")
)


def stale_shm(engine_segments: Sequence[str] = ()) -> re.Pattern[str]:
    """STALE_SHM and the engine's own segment names."""
    if not engine_segments:
        return STALE_SHM
    return re.compile("|".join((STALE_SHM.pattern, *engine_segments)))


def check_shm_dir(plan: Plan, directory: str) -> list[Problem]:
    """LLMD_SHM_DIR must be a tmpfs (shared memory, not a volume) that holds no model. Directories are
    compared as files (device + inode) along both paths: a bind mount of the model's tmpfs parent
    shares no path with the model, only its directory."""
    if not directory or not Path(directory).is_dir():
        return []
    fix = "point LLMD_SHM_DIR at the engine container's /dev/shm, or set it empty to skip the clean-up"
    real = os.path.realpath(directory)
    fs = _filesystem(real)
    if fs != "tmpfs":
        return [Problem("LLMD_SHM_DIR", f"{directory!r} is on {fs}, not a tmpfs (shared memory)", fix)]
    model = plan.model_path
    if model and model.startswith("/"):
        model = os.path.realpath(model)
        if os.path.commonpath([real, model]) in (real, model) or _nested(real, model):
            return [Problem("LLMD_SHM_DIR", f"{directory!r} holds or lies inside the model path", fix)]
    return []


# This pod's group-member marker in the shm directory, by (directory, group, worker index): its lock
# says the pod lives, so it stays open; a parked pod's next preflight replaces it.
HELD_SHM_MARKERS: dict[tuple[str, str, int], int] = {}


def check_shm_private(plan: Plan, directory: str, pod_ip: str | None) -> list[Problem]:
    """plan.needs.private_shm: no other live pod of the group may have marked the same shm directory
    from another POD_IP (launcher/supervise/host/shared_shm.py), or /dev/shm is shared across network
    namespaces and the engine hangs in its distributed init."""
    why = plan.needs.private_shm
    if why is None or not directory or not pod_ip or not Path(directory).is_dir():
        return []
    from launcher.supervise.host.shared_shm import claim_membership

    key = (directory, plan.role.leader_address or plan.role.pool, plan.role.worker_index)
    try:
        fd, others = claim_membership(*key, pod_ip)
    except OSError as exc:
        fix = "give the container a writable /dev/shm (an emptyDir with medium: Memory)"
        return [
            Problem("LLMD_SHM_DIR", f"cannot write this pod's group marker in {directory!r} ({exc})", fix)
        ]
    previous = HELD_SHM_MARKERS.pop(key, None)
    if previous is not None:  # the marker it locked was replaced by the new one
        os.close(previous)
    HELD_SHM_MARKERS[key] = fd
    if not others:
        return []
    members = ", ".join(f"worker {m.worker_index} ({m.pod_ip})" for m in others)
    return [
        Problem(
            "/dev/shm",
            f"{directory} is shared with {members} of this LWS group, whose network is not this pod's "
            f"({pod_ip}): {why}",
            "give each pod its own /dev/shm (an emptyDir with medium: Memory; no hostIPC, no hostPath "
            "/dev/shm), or share the network too (hostNetwork: true)",
        )
    ]


def _nested(one: str, other: str) -> bool:
    """Is either directory the other or above it, compared as files (device + inode)?"""
    first, second = _lineage(one), _lineage(other)
    return bool(first and first[0] in second) or bool(second and second[0] in first)


def _lineage(path: str) -> list[tuple[int, int]]:
    """(device, inode) of a canonical path and of each directory above it, nearest first; empty
    when the path itself does not exist."""
    out = []
    for step in (path, *map(str, Path(path).parents)):
        try:
            st = os.stat(step)
        except OSError:
            if step == path:
                return []
            continue
        out.append((st.st_dev, st.st_ino))
    return out


def _filesystem(path: str) -> str:
    """The type of the filesystem mounted nearest above path (/proc/self/mountinfo)."""
    best, kind = "", "an unknown filesystem"
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
        for line in mounts:
            fields, _, rest = line.partition(" - ")
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields.split()[4])
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, rest.split()[0]
    return kind


@dataclass(frozen=True)
class ShmCleanup:
    """What clean_shm did: removed, could not remove ("name (reason)"), left because nothing proves
    them ours (a count), and the ledger's problem when it could not be read."""

    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unproven: int = 0
    ledger_problem: str | None = None


def clean_shm(directory: str, engine_segments: Sequence[str] = (), pod_name: str | None = None) -> ShmCleanup:
    """Remove the stale shared memory of crashed engines (llm-d/llm-d#352: one crash would otherwise
    become a crash loop), and only what the launcher can prove its own: regular files directly in the
    directory, named as the engines name their segments (STALE_SHM and the plan's engine_segments),
    that the ledger (launcher/supervise/shm_ledger.py) says this pod's process tree held, with the same inode
    (a file made again under that name by someone else is not ours), owned by the launcher's own uid
    (a ledger another user could write proves nothing: read_ledger ignores it), and that no process we can see
    holds open or mapped. A file in use is known by its device and inode, as /proc shows them,
    whatever path spells the directory (Debian's /run/shm is a symlink to /dev/shm). Symlinks and
    subdirectories are never followed. No ledger: nothing is removed. The ledger then keeps only
    what is left of ours."""
    root = Path(os.path.realpath(directory))
    if not root.is_dir():
        return ShmCleanup()
    stale = stale_shm(engine_segments)
    ledger = read_ledger(root)
    ours = ledger.files(pod_name)
    in_use = files_held(root.stat().st_dev, visible_pids())
    removed: list[str] = []
    failed: list[str] = []
    unproven = 0
    for entry in root.iterdir():
        if not stale.fullmatch(entry.name):
            continue
        try:
            st = entry.lstat()
            if not stat.S_ISREG(st.st_mode):
                continue
            if ours.get(entry.name) != st.st_ino or st.st_uid != os.geteuid():
                unproven += 1
                continue
            if (st.st_dev, st.st_ino) in in_use:
                continue
            entry.unlink()
            removed.append(entry.name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            failed.append(f"{entry.name} ({exc.strerror or type(exc).__name__})")
    if ledger.owners or ledger.problem:
        with contextlib.suppress(OSError):  # a read-only directory: the ledger said no more than this
            write_ledger(root, still_there(root, ledger.owners))
    return ShmCleanup(removed, failed, unproven, ledger.problem)


async def _bounded(what: str, fn: Callable[..., T], *args: Any) -> T:
    try:
        return await asyncio.wait_for(in_daemon_thread(fn, *args), timeout=CHECK_TIMEOUT)
    except asyncio.TimeoutError:
        raise ConfigError.one(
            f"preflight {what}", f"did not finish within {CHECK_TIMEOUT:g} s", "check the node"
        ) from None


async def run_preflight(
    plan: Plan,
    *,
    bin_path: str,
    runtime_dir: str,
    shm_dir: str,
    log: Log,
    sysfs_root: str = "/sys",
    store_master_wait_seconds: float = 0.0,
    pod_ip: str | None = None,
    pod_name: str | None = None,
    warned: set[str] | None = None,
) -> HostReport:
    """All local checks; every problem found is reported at once. Returns what the host checks found
    (the interface that holds POD_IP, the RDMA ports, the installed engine) for run to fill in. The
    KV store's master is waited for last, once everything local passed. `warned`: the warnings said
    by earlier runs (a parked pod's re-checks), not said again."""
    warned = set() if warned is None else warned

    def warn(problem: Problem) -> None:
        if str(problem) not in warned:
            warned.add(str(problem))
            log.warning("preflight warning", problem=str(problem))

    from launcher.supervise.host import check_host

    problems: list[Problem] = []
    problems += await _bounded("/proc", check_proc)
    problems += check_canary_key(plan, os.environ)
    problems += await _bounded("model path", check_model, plan)
    problems += await _bounded("binaries", check_binaries, plan, bin_path)
    problems += await _bounded("runtime directory", check_runtime_dir, plan, runtime_dir)
    problems += await _bounded("ports", check_ports_free, plan)
    problems += await _bounded("shm directory", check_shm_dir, plan, shm_dir)
    problems += await _bounded("shm shared across pods", check_shm_private, plan, shm_dir, pod_ip)
    host = await _bounded("host", check_host, plan, bin_path, sysfs_root)
    for warning in host.warnings:
        warn(warning)
    problems += host.problems
    if problems:
        raise ConfigError(problems)
    if plan.needs.store_master is not None:
        advisory = "store-master" in plan.needs.advisory
        wait = store_master_wait_seconds
        problem = await wait_for_store_master(plan.needs.store_master, wait, log, once=advisory)
        if problem is not None and advisory:
            warn(problem)
        elif problem is not None:
            raise ConfigError([problem])
    if shm_dir:
        done = await _bounded("shm clean-up", clean_shm, shm_dir, plan.needs.shm_segments, pod_name)
        if done.ledger_problem:
            log.warning(
                "shared-memory ledger treated as empty",
                file=f"{shm_dir}/{LEDGER_NAME}",
                problem=done.ledger_problem,
            )
        log.info(
            "removed stale shared-memory files",
            directory=shm_dir,
            count=len(done.removed),
            files=done.removed[:20],
        )
        if done.unproven:
            log.info("not removed: not proven the launcher's own", directory=shm_dir, count=done.unproven)
        if done.failed:
            log.warning(
                "could not remove stale shared-memory files", directory=shm_dir, files=done.failed[:20]
            )
    return host
