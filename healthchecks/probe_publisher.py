"""The launcher's side of the probe process (healthchecks/probe_process.py): it starts the process on
the probe port's listening sockets, publishes PodHealth's three answers to it whenever they change
(looked at every PUBLISH_INTERVAL; a heartbeat every HEARTBEAT_SECONDS otherwise), feeds the
durations it reports into the probe histogram, and starts another if it ends. The answers are still
computed (by PodHealth) and scrubbed here: the process only holds the latest bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from healthchecks import probe_process
from healthchecks.probe_process import (
    HEARTBEAT,
    HEARTBEAT_SECONDS,
    LATENCIES,
    PUBLISH_INTERVAL,
    REPORT_BYTES,
    SNAPSHOT,
    message,
    read_message,
)
from healthchecks.state import Answer, PodHealth
from launcher.contract.endpoints import PROBE_ENDPOINTS

RESPAWN_SECONDS = 1.0  # at most one new probe process a second, should one keep dying
OUTPUT_SHOWN = 2000  # characters of what the process wrote to stderr, at most, in one log event


class ProbePublisher:
    """`answers`: path -> the PodHealth method answering it; `observe(endpoint, seconds)`: the probe
    histogram; `server`: the Server header aiohttp sends; `backend`: the abstract Unix address of the
    launcher's aiohttp application; `spared`: the processes (by pid) the supervisor must neither
    signal nor report (the probe process: this reports its end, whoever reaps it)."""

    def __init__(
        self,
        health: PodHealth,
        answers: Mapping[str, Callable[[], Answer]],
        scrub: Callable[[Any], Any],
        listeners: Sequence[socket.socket],
        backend: bytes,
        observe: Callable[[str, float], None],
        server: str,
        silent_after: float,
        log: Callable[[str], None],
    ) -> None:
        self.health, self.answers, self.scrub = health, answers, scrub
        self.listeners, self.backend, self.observe, self.server = listeners, backend, observe, server
        self.silent_after, self.log = silent_after, log
        self.spared: dict[int, subprocess.Popen[bytes]] = {}
        self.endpoints = {e.path: e for e in PROBE_ENDPOINTS.values()}
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: socket.socket | None = None
        self._published = ""  # the latest snapshot sent, as compared
        self._sent_at = 0.0  # time.monotonic() of the latest message
        self._spawned_at = -RESPAWN_SECONDS
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._spawn()
        self._task = asyncio.get_running_loop().create_task(self._publish_forever())

    def stop(self) -> None:
        """The process is SIGKILLed before the probe port closes: nothing answers for a launcher that
        left. Not waited for: a killed process runs no more of its code, its teardown runs beside the
        launcher's own exit (off the death path), and what is left is reaped by whoever outlives us."""
        if self._task is not None:
            self._task.cancel()
        self._relay_output()
        self._end_process(wait=False)

    async def _publish_forever(self) -> None:
        said = ""
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL)
            try:
                self.publish()
            except Exception as exc:  # an answer that raised: nothing published, so probes fail at 2 s
                if repr(exc) != said:
                    said = repr(exc)
                    with contextlib.suppress(Exception):  # a log that cannot be written stops nothing
                        self.log(f"the probes' answers could not be published: {said[:300]}")

    def publish(self) -> None:
        """Send the answers if they changed (a heartbeat if not); take the reported durations and what
        the process wrote to stderr; start a new process if the last one ended."""
        self.take_durations()
        self._relay_output()
        if self.process is not None and self.process.poll() is not None:
            ended, code = self.process.pid, self.process.returncode
            self._relay_output()
            self._end_process()
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            self.log(f"the probe process (pid {ended}) {how}; starting another at most every 1 s")
        if self.process is None:
            if time.monotonic() - self._spawned_at >= RESPAWN_SECONDS:
                self._spawn()
            return
        self._send()

    def _relay_output(self) -> None:
        """What the process wrote to stderr (a traceback, asyncio's report of a failed callback) becomes
        one launcher log event, scrubbed, so the pod's log keeps one schema. Read at every look, so
        the pipe never fills and blocks the process."""
        pipe = self.process.stderr if self.process is not None else None
        if pipe is None:
            return
        chunks = []
        while True:
            try:
                chunk = os.read(pipe.fileno(), REPORT_BYTES)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        text = b"".join(chunks).decode("utf-8", "replace").strip()
        if text:
            shown = text if len(text) <= OUTPUT_SHOWN else "..." + text[-OUTPUT_SHOWN:]
            self.log(f"the probe process wrote: {self.scrub(shown)}")

    def take_durations(self) -> None:
        """Every duration the process reported so far (also read at scrape time, so /metrics counts
        the probes answered before it)."""
        while self.channel is not None:
            try:
                data = self.channel.recv(REPORT_BYTES)
            except OSError:  # BlockingIOError: nothing more
                return
            if not data:
                return
            kind, _, payload = read_message(data)
            if kind == LATENCIES:
                for endpoint, seconds in payload:
                    self.observe(endpoint, seconds)

    def answers_now(self) -> tuple[str, dict[str, Any]]:
        """(what is compared, what is sent): every answer, its ticking fields apart; the comparison is
        made before scrubbing, which costs more than the rest of a look."""
        now = self.health.clock()
        moments = self.health.counting_from()
        identity, phase = self.health.identity, self.health.phase
        answers: dict[str, dict[str, Any]] = {}
        for path, answer in self.answers.items():
            ok, body = answer()
            ticking = {name: now - moments[name] for name in moments if name in body}
            endpoint = self.endpoints[path]  # what the probe process says alone, when this launcher is silent
            answers[path] = {
                "status": 200 if ok else 503,
                "body": {**body, **dict.fromkeys(ticking)},
                "ticking": ticking,
                "key": endpoint.key,
                "liveness": endpoint.liveness,
            }
        compared = json.dumps([identity, phase, [(a["status"], a["body"]) for a in answers.values()]])
        return compared, {"identity": identity, "server": self.server, "phase": phase, "answers": answers}

    def _send(self, force: bool = False) -> None:
        compared, snapshot = self.answers_now()
        now = time.monotonic()
        if force or compared != self._published:
            for answer in snapshot["answers"].values():
                answer["body"] = self.scrub(answer["body"])
            data = message(SNAPSHOT, now, snapshot)
        elif now - self._sent_at >= HEARTBEAT_SECONDS:
            data, compared = message(HEARTBEAT, now), self._published
        else:
            return
        assert self.channel is not None
        try:
            self.channel.send(data)
        except BlockingIOError:  # the process lags: the next look sends the whole state again
            self._published = ""
            return
        except OSError:
            return
        self._published, self._sent_at = compared, now

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        self.channel = ours
        self._send(force=True)  # waiting in the channel when the process starts reading
        fds = [s.fileno() for s in self.listeners]
        self._spawned_at = time.monotonic()
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",  # no PYTHON* variables, no user site: the standard library only
                    "-S",
                    probe_process.__file__,
                    f"--parent={os.getpid()}",
                    f"--listen={','.join(map(str, fds))}",
                    f"--channel={theirs.fileno()}",
                    f"--backend={self.backend.hex()}",
                    f"--silent-after={self.silent_after}",
                ],
                pass_fds=(*fds, theirs.fileno()),
                env={},  # the pod's secrets stay in the launcher
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,  # relayed to the launcher's log (_relay_output)
                start_new_session=True,  # a terminal's signals to the launcher's group are the launcher's
            )
        finally:
            theirs.close()
        assert self.process.stderr is not None
        os.set_blocking(self.process.stderr.fileno(), False)
        self.spared[self.process.pid] = self.process

    def _end_process(self, wait: bool = True) -> None:
        process, self.process = self.process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(ChildProcessError):
                if wait:
                    process.wait()
            if process.stderr is not None:
                process.stderr.close()
            self.spared.pop(process.pid, None)
        if self.channel is not None:
            self.channel.close()
            self.channel = None
