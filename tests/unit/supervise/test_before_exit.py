"""What `run` finishes before the entry point's os._exit: output a slow reader has not taken yet is
written out (ChildOutput.drain) for a bounded time, since a reader that never comes back must not
keep a dead pod from exiting; thread work in flight is waited for, idle threads are not."""

from __future__ import annotations

import os
import threading
import time

from launcher.supervise.logs import FdWriter

LINE = "x" * 199 + "\n"
LINES = 2000  # 400 KB: six times a pipe's 64 KiB, so most of it waits in the writer's queue


def _filled_writer() -> tuple[int, FdWriter]:
    read, write = os.pipe()
    os.set_blocking(write, False)
    writer = FdWriter(write, lambda n: f"{n} dropped\n")
    for _ in range(LINES):
        writer.write(LINE)
    assert writer.queue  # the pipe is full: the rest is queued
    return read, writer


def test_drain_writes_out_everything_a_late_reader_then_takes() -> None:
    read, writer = _filled_writer()
    received = bytearray()

    def late_reader() -> None:
        time.sleep(0.2)
        while chunk := os.read(read, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=late_reader)
    reader.start()
    writer.drain(time.monotonic() + 30)
    os.close(writer.fd)
    reader.join(30)
    assert not writer.queue and writer.dropped == 0
    assert received.decode() == LINE * LINES


def test_drain_gives_up_at_its_deadline_when_nobody_reads() -> None:
    read, writer = _filled_writer()
    deadline = time.monotonic() + 0.2
    draining = threading.Thread(target=writer.drain, args=(deadline,), daemon=True)
    draining.start()
    draining.join(10)  # far past the deadline: a drain that waits for the reader never returns
    try:
        assert not draining.is_alive()
        assert time.monotonic() >= deadline and writer.queue  # it waited, then left the rest
    finally:
        os.close(read)
        os.close(writer.fd)


def test_the_loops_thread_work_says_whether_any_is_in_flight() -> None:
    """At exit, run waits for thread work in flight (a preflight probe's subprocess must not outlive
    the launcher) and leaves idle threads to end with the process."""
    from launcher.run import _ThreadWork

    threads, release = _ThreadWork(), threading.Event()
    try:
        assert not threads.busy
        future = threads.submit(release.wait, 30)
        assert threads.busy
        release.set()
        future.result(30)
        deadline = time.monotonic() + 30
        while threads.busy and time.monotonic() < deadline:  # the done-callback runs in the worker
            time.sleep(0.01)
        assert not threads.busy
    finally:
        release.set()
        threads.shutdown(wait=True)
