"""The exit-code table: every code `run` can end with, what it means, and how the termination message
words it. `run --help`, the termination messages of the codes the launcher chooses and
docs/reference/exit-codes.md are generated from it (scripts/generate_docs.py).

Standard library only: `--help` reads it, and the exec probe imports the CLI module."""

from __future__ import annotations

import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class ExitCode:
    """One row of the table. `reason` is how the termination message begins, with `{field}`s the
    caller fills in (`says`); rows whose code comes from elsewhere (the engine, a signal) have none."""

    code: str  # as a person reads it: "3", "128+N", "the engine's own"
    name: str
    meaning: str
    reason: str = ""
    # Every non-zero exit restarts the container, and LWS (RecreateGroupOnPodRestart, its default)
    # then recreates the whole group; the launcher makes no distinction between codes today.
    recreates_group: bool = True

    @property
    def number(self) -> int:
        """The code itself, for the rows the launcher chooses."""
        return int(self.code)

    def says(self, **fields: object) -> str:
        """The termination message's first words for this code."""
        return self.reason.format(**fields)


OK = ExitCode("0", "ok", "a requested stop (SIGTERM/SIGINT) completed in time", recreates_group=False)
ENGINE_OWN = ExitCode("the engine's own", "engine-exit", "the engine exited by itself with that code")
SIGNALLED = ExitCode(
    "128+N",
    "signalled",
    "signal N killed the engine (137 SIGKILL, 139 SIGSEGV), or a process had to be SIGKILLed while stopping",
)
INTERNAL_ERROR = ExitCode(
    "1",
    "internal-error",
    "an internal error of the launcher, or a sidecar that crash-looped with exit code 0",
    "llm-d-launcher internal error: {error}",
)
BAD_INPUT = ExitCode(
    "2", "bad-input", "bad input or a failed preflight: one line per problem, nothing spawned"
)
ENGINE_QUIT = ExitCode(
    "3",
    "engine-quit",
    "the engine exited 0 although no stop was asked for (a DP supervisor does after a rank died): "
    "a crash, not a success",
    "{process} exited with code 0 although no stop was asked for",
)
GROUP_BROKEN = ExitCode(
    "4",
    "group-broken",
    "another pod of the LWS group is gone: its launcher answered /livez once and then not for "
    "LLMD_PEER_LOST_SECONDS",
    "group member {peer} is gone: {detail}",
)
STALLED = ExitCode(
    "5",
    "stalled",
    "the engine stalled: its token counters stood still for LLMD_STALL_SECONDS and a one-token canary "
    "failed or took longer than LLMD_CANARY_SECONDS",
    "engine stalled: {detail}",
)
STARTUP_DEADLINE = ExitCode(
    "6",
    "startup-deadline",
    "start-up did not end within LLMD_STARTUP_SECONDS",
    "start-up deadline: not started within LLMD_STARTUP_SECONDS={seconds:g} s; stuck in {where}",
)
NOT_RUNNABLE = ExitCode("126, 127", "not-runnable", "a binary could not be executed, or was not found")

EXIT_CODES = (
    OK,
    ENGINE_OWN,
    SIGNALLED,
    INTERNAL_ERROR,
    BAD_INPUT,
    ENGINE_QUIT,
    GROUP_BROKEN,
    STALLED,
    STARTUP_DEADLINE,
    NOT_RUNNABLE,
)


def exit_code_of(code: int) -> int:
    """A shell-style exit code: a child killed by signal N gives 128+N (SIGKILL 137, SIGTERM 143)."""
    return 128 - code if code < 0 else code


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # real-time signals have no name
        return f"signal {signum}"


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"
