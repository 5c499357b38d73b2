"""What every catchable signal means to `run`, and the handlers installed in the entry point's very
first lines: a SIGTERM that comes while Python is still importing must not be lost (PID 1 ignores a
signal it has no handler for) nor kill the launcher by its default action (outside PID 1).

Standard library only: this runs before anything heavy is imported.
"""

from __future__ import annotations

import signal
import sys

# Stop the pod: drain the engine, then the sidecars, within the grace period.
STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
# Logged and otherwise ignored: their default action would end the launcher and orphan the engine
# (a closed terminal's SIGHUP, a stray `kill -USR1`). SIGPIPE stays ignored as Python sets it (a
# closed output pipe is a failed write, not a death); children get it back at exec (subprocess's
# restore_signals). Real-time signals terminate by default too.
IGNORED = (
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    signal.SIGVTALRM,
    signal.SIGPROF,
    signal.SIGIO,
    signal.SIGPWR,
    signal.SIGXCPU,
    signal.SIGXFSZ,
    *range(signal.SIGRTMIN, signal.SIGRTMAX + 1),
)

RECEIVED: list[int] = []  # stop signals that came before the event loop took over, in order


def _record(signum: int, _frame: object) -> None:
    if signum in STOP:
        RECEIVED.append(signum)


def install() -> None:
    """Python-level handlers (not SIG_IGN: an ignored disposition would survive exec into the
    engine; a handler is reset to the default there)."""
    for sig in (*STOP, *IGNORED):
        signal.signal(sig, _record)


def install_for_run(argv: list[str]) -> None:
    """Only `run` is a supervisor; `plan` or `probe` must still die of SIGTERM as any command does."""
    if argv[1:2] == ["run"]:
        install()


install_for_run(sys.argv)
