"""STAND-IN for "a machine with enough cores", for the P/D engines of tests/group/test_pd_group.py.

The P/D test puts this directory on the engines' PYTHONPATH (the harness env of `local-group`, never the
recipe), so Python imports it at start-up in every process of the pod. It acts only in processes whose
environment the launcher's plan gave a NIXL side channel (`VLLM_NIXL_SIDE_CHANNEL_PORT`: the engine and
its children), so the launcher's own process never changes. It sidesteps two upstream choices that
cost nothing on a GPU node with dozens of cores and starve a 2-core machine running two engines:

1. NIXL's UCX progress thread spins a whole core per engine, idle or not: `nixl_agent.__init__`
   hard-codes `agent_config.pthrDelay = 0` (nixl 1.5.1 from PyPI, `nixl_cu13/_api.py` l.226; the
   shared thread then calls poll() with a 0 ms timeout in a loop, ai-dynamo/nixl
   `src/plugins/ucx/ucx_backend.cpp` nixlUcxSharedThread::run), and vLLM always keeps the thread.
   Here that thread runs at nice 19: it still spins and progresses every transfer, but only on CPU
   time nothing else wants, as on a machine where it has a core of its own. (A 1 ms poll delay instead,
   pthrDelay = 1000, hung the first transfer here: decode's NIXL read never completed and prefill's
   lease expired with the blocks "retrieved by 0 remote worker(s)".)
2. On CPU, vLLM's NIXL worker pins the calling (model) thread to the last core of each NUMA node
   (vllm 0.32.0 `distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py` l.701-714,
   `os.sched_setaffinity(0, rsv_cores_for_kv)`): on a 2-core machine both engines land on core 1.
   Here that one call is skipped; every other use of `os` in that module is untouched.

Nothing of the transfer changes: the agent, its configuration, UCX, the registration and every read
are NIXL's own. Each patch prints one `stand-in enough_cores:` line to stderr (the pod's log), which the
test requires, so it can neither run without the stand-in nor be fooled by a stand-in that did not
apply.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

NICE = 19  # the spinning progress thread yields to every other thread of the machine
SAMPLE_SECONDS = 0.2  # how long the new threads' CPU time is watched to find the one that spins
MARK = "stand-in enough_cores:"
NIXL_APIS = ("nixl_cu13._api", "nixl_cu12._api")  # whichever wheel `nixl` picks (nixl/__init__.py)
NIXL_WORKER = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker"


def _say(line: str) -> None:
    print(f"{MARK} {line} (pid {os.getpid()})", file=sys.stderr, flush=True)


def _threads() -> set[int]:
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def _cpu_ticks(tid: int) -> int:
    """utime + stime of one thread (proc(5): fields 14 and 15, after the parenthesised name)."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _spinning(threads: set[int]) -> tuple[int, float]:
    """The thread among `threads` that used the most CPU over SAMPLE_SECONDS, and its share of a core."""
    before = {tid: _cpu_ticks(tid) for tid in threads}
    time.sleep(SAMPLE_SECONDS)
    used = {tid: _cpu_ticks(tid) - ticks for tid, ticks in before.items()}
    tid = max(used, key=lambda t: used[t])
    return tid, used[tid] / os.sysconf("SC_CLK_TCK") / SAMPLE_SECONDS


def _lower_the_progress_thread(api: types.ModuleType) -> None:
    agent_class = api.nixl_agent
    create = agent_class.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        before = _threads()
        create(self, *args, **kwargs)
        born = _threads() - before
        if not born:
            _say("NIXL agent started no thread: nothing to lower")
            return
        tid, share = _spinning(born)
        os.setpriority(os.PRIO_PROCESS, tid, NICE)
        _say(
            f"NIXL progress thread {tid} ({share:.0%} of a core, of {len(born)} new threads) "
            f"lowered to nice {NICE}"
        )

    agent_class.__init__ = __init__


class _OsWithoutThreadPin(types.ModuleType):
    """`os` as vLLM's NIXL worker sees it, except that pinning a thread to cores is skipped."""

    def __init__(self) -> None:
        super().__init__("os")

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def sched_setaffinity(self, pid: int, cores: Any) -> None:
        _say(f"skipped vLLM's CPU NIXL pin of thread {pid or 'self'} to cores {sorted(cores)}")


def _skip_the_thread_pin(worker: types.ModuleType) -> None:
    vars(worker)["os"] = _OsWithoutThreadPin()


class _PatchedLoader(importlib.abc.Loader):
    """Runs the real loader, then one patch on the module it made."""

    def __init__(self, loader: importlib.abc.Loader, patch: Callable[[types.ModuleType], None]) -> None:
        self._loader = loader
        self._patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        self._patch(module)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds the named modules with the other finders and patches them once they are loaded."""

    def __init__(self, patches: dict[str, Callable[[types.ModuleType], None]]) -> None:
        self._patches = patches

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = self._patches.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchedLoader(spec.loader, patch)
                return spec
        return None


if "VLLM_NIXL_SIDE_CHANNEL_PORT" in os.environ:
    sys.meta_path.insert(
        0,
        _AfterImport(
            {**dict.fromkeys(NIXL_APIS, _lower_the_progress_thread), NIXL_WORKER: _skip_the_thread_pin}
        ),
    )
