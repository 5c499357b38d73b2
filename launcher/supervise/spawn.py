"""How the supervisor starts, signals and reaps processes: one seam (as honcho's Manager takes a process
constructor), so its life cycle can be scripted in unit tests and runs on real subprocesses in pods."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import IO, NamedTuple, Protocol

from launcher.contract.plan import ProcessSpec

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
try:  # resolved once, here: the forked child must not load anything before exec
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None
# Linux >= 4.2 with CONFIG_PROC_CHILDREN (every common distribution kernel) lists a thread's children.
KERNEL_LISTS_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


class ChildHandle(Protocol):
    """A started process: its pid (also its process group) and the pipes its output comes through."""

    @property
    def pid(self) -> int: ...
    @property
    def stdout(self) -> IO[bytes] | None: ...
    @property
    def stderr(self) -> IO[bytes] | None: ...


class Descendant(NamedTuple):
    pid: int
    pgid: int


class Spawner(Protocol):
    def watch(self, on_exit: Callable[[], None]) -> Callable[[], None]:
        """Call on_exit whenever a child may have exited; returns the function that stops watching."""
        ...

    def start(self, spec: ProcessSpec, env: dict[str, str]) -> ChildHandle:
        """In its own process group. Raises OSError or ValueError when it cannot start."""
        ...

    def reap(self) -> list[tuple[int, int]]:
        """(pid, code as os.waitstatus_to_exitcode) of every child that exited, without blocking."""
        ...

    def kill(self, pid: int, sig: int) -> None: ...
    def killpg(self, pgid: int, sig: int) -> None: ...
    def descendants(self) -> list[Descendant]:
        """Every live (not zombie) descendant, orphans re-parented to us included."""
        ...


class SubprocessSpawner:
    """The real thing: subprocess, waitpid, kill/killpg, psutil; as a child subreaper. `spared`: the
    launcher's own helpers (the probe process) by pid, never listed as descendants, so never
    signalled nor waited for: they outlive the stop and end with the launcher. One the reaper reaps
    gets its exit code in its Popen and is not returned: its owner reports its end, once, as it was
    (reported here, a SIGKILLed probe process was "reaped orphaned process code=137", then "exited
    with code 0" by its owner, whose Popen found no child left)."""

    def __init__(self, spared: Mapping[int, subprocess.Popen[bytes]] | None = None) -> None:
        self._popens: dict[int, subprocess.Popen[bytes]] = {}
        self.spared: Mapping[int, subprocess.Popen[bytes]] = spared if spared is not None else {}

    def watch(self, on_exit: Callable[[], None]) -> Callable[[], None]:
        become_subreaper()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGCHLD, on_exit)

        def unwatch() -> None:
            loop.remove_signal_handler(signal.SIGCHLD)

        return unwatch

    def start(self, spec: ProcessSpec, env: dict[str, str]) -> ChildHandle:
        popen = subprocess.Popen(
            list(spec.argv),
            executable=shutil.which(spec.argv[0], path=env.get("PATH")) or spec.argv[0],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: signals reach its whole tree
            close_fds=True,
            preexec_fn=die_with(os.getpid()),
        )
        self._popens[popen.pid] = popen
        return popen

    def reap(self) -> list[tuple[int, int]]:
        """The one place children are reaped: ours and orphans re-parented to us."""
        exited = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            if (helper := self.spared.get(pid)) is not None:
                helper.returncode = code  # its owner reports the end (its poll() reads this)
                continue
            if (popen := self._popens.pop(pid, None)) is not None:
                popen.returncode = code  # keep subprocess from waiting on a reaped pid
            exited.append((pid, code))
        return exited

    def kill(self, pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)

    def killpg(self, pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def descendants(self) -> list[Descendant]:
        """Walked down the kernel's children lists from this process: it reads only our own subtree,
        where psutil's walk reads every process of the host (~2 ms a look here, against ~0.1 ms, and the
        stop path looks at least twice). psutil where the kernel keeps no such list."""
        if not KERNEL_LISTS_CHILDREN:
            return self._descendants_by_psutil()
        alive, todo = [], _children_of(os.getpid()) or []
        while todo:
            pid = todo.pop()
            children = _children_of(pid)
            todo.extend(children or ())
            if pid in self.spared or children is None:  # gone meanwhile
                continue
            with contextlib.suppress(OSError):
                if _state(pid) != "Z":
                    alive.append(Descendant(pid, os.getpgid(pid)))
        return alive

    def _descendants_by_psutil(self) -> list[Descendant]:
        import psutil

        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            return []
        alive = []
        for child in children:
            if child.pid in self.spared:
                continue
            with contextlib.suppress(psutil.Error, OSError):
                if child.status() != psutil.STATUS_ZOMBIE:
                    alive.append(Descendant(child.pid, os.getpgid(child.pid)))
        return alive


def _children_of(pid: int) -> list[int] | None:
    """The pids whose parent is one of pid's threads (/proc/PID/task/TID/children, proc(5)); None when
    pid is gone. A child forked during the read can be missed: the sweep looks until it sees nothing
    twice, and freezes what it finds before it kills."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    children: list[int] = []
    for task in tasks:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children", "rb") as listing:
            children.extend(int(child) for child in listing.read().split())  # a thread that ended: none
    return children


def _state(pid: int) -> str:
    """The process's state letter (/proc/PID/stat, after the parenthesised name): Z for a zombie."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rpartition(b")")[2].split()[0].decode()


def become_subreaper() -> None:
    """Orphaned grandchildren are re-parented to us (not to the node's init) so we reap them."""
    if os.getpid() == 1:
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def die_with(parent: int) -> Callable[[], None]:
    """In the child before exec: SIGKILL it when the launcher dies, even of SIGKILL (outside PID 1 the
    engine would otherwise live on as an orphan, its port still answering). The kernel sends it when
    the *thread* that forked exits: the launcher forks from its main thread, which lives until exit."""

    def set_pdeathsig() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the line above took effect
            os._exit(1)

    return set_pdeathsig


def search_path(bin_path: str, env: dict[str, str] | None = None) -> str:
    """LLMD_BIN_PATH first (engine venvs), then the process's PATH."""
    base = (env or {}).get("PATH") or os.environ.get("PATH") or os.defpath
    return f"{bin_path}{os.pathsep}{base}" if bin_path else base
