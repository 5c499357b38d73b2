"""SubprocessSpawner.descendants reads the kernel's children lists: the same processes psutil's
whole-host walk finds (grandchildren, orphans re-parented to a subreaper, threads' children), zombies
and spared helpers left out."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from launcher.supervise import spawn
from launcher.supervise.spawn import SubprocessSpawner

pytestmark = pytest.mark.skipif(not spawn.KERNEL_LISTS_CHILDREN, reason="the kernel lists no children")

# A child that forks a grandchild (which sleeps) and a great-grandchild whose parent then exits, so it
# is re-parented to the nearest subreaper: this test process (spawn.become_subreaper).
TREE = """
import os, sys, time
if os.fork() == 0:
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(30)
        os._exit(0)
    time.sleep(30)
time.sleep(30)
"""


def _by_psutil() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    spawn.become_subreaper()
    child = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        yield child
    finally:
        os.killpg(child.pid, 9)
        child.wait()
        SubprocessSpawner().reap()


def _settled(spawner: SubprocessSpawner, count: int) -> set[int]:
    until = time.monotonic() + 10
    while time.monotonic() < until:
        SubprocessSpawner().reap()  # the orphan's exited parent, re-parented to us as a zombie
        pids = {d.pid for d in spawner.descendants()}
        if len(pids) >= count and pids == _by_psutil():
            return pids
        time.sleep(0.02)
    return {d.pid for d in spawner.descendants()}


def test_it_finds_what_a_walk_of_every_process_finds(tree: subprocess.Popen[bytes]) -> None:
    spawner = SubprocessSpawner()
    found = _settled(spawner, 3)
    assert found == _by_psutil() and len(found) == 3 and tree.pid in found
    assert {d.pgid for d in spawner.descendants()} == {tree.pid}  # their own session's group


def test_a_spared_helper_and_a_zombie_are_not_descendants(tree: subprocess.Popen[bytes]) -> None:
    helper = subprocess.Popen([sys.executable, "-c", "pass"])
    helper_gone = time.monotonic() + 10
    while psutil.Process(helper.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < helper_gone:
        time.sleep(0.01)
    spared = SubprocessSpawner({tree.pid: tree})
    pids = {d.pid for d in spared.descendants()}
    assert tree.pid not in pids and helper.pid not in pids
    helper.wait()


def test_a_child_of_another_live_thread_is_found() -> None:
    """The kernel lists a child under the thread that forked it (one file per thread)."""
    started: list[subprocess.Popen[bytes]] = []
    forked, done = threading.Event(), threading.Event()

    def fork_and_stay() -> None:
        started.append(subprocess.Popen(["sleep", "30"]))
        forked.set()
        done.wait(10)

    thread = threading.Thread(target=fork_and_stay)
    thread.start()
    forked.wait(10)
    try:
        assert started[0].pid in {d.pid for d in SubprocessSpawner().descendants()}
    finally:
        done.set()
        thread.join()
        started[0].kill()
        started[0].wait()
