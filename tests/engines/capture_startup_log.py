"""Captures a real engine's start-up log for the replay test (tests/unit/healthchecks/
test_startup_log_replay.py): runs the engine command until a line holds READY (or it exits, or TIMEOUT
seconds pass), stops its process group, and writes the output scrubbed and small.

    python tests/engines/capture_startup_log.py OUT READY TIMEOUT ENGINE-ARGV...

Run it in the engine's environment (tests/engines/engine_venvs.py engine_env) and under the machine's
real-engine lock. Scrubbed: terminal colours, this machine's paths (venvs, the model, temp dirs),
repeated route / import-error lines and traceback frames (the exception lines stay); very long lines
(the full argument dump) are cut.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PATHS = (
    (re.compile(r"/[\w./-]*?/venvs/([\w-]+)"), r"/venvs/\1"),
    (re.compile(r"/[\w./-]*?/lib/python3\.\d+/"), "/python/"),
    (re.compile(r"/tmp/[\w./-]*?/model\b"), "/models/tiny"),
    (re.compile(r"/tmp/[\w./-]+"), "/tmp/run"),
)
_REPEATED = ("Route: ", "Ignore import error", "warnings.warn(", "UserWarning")
_KEEP_REPEATED = 2
_LINE_LIMIT = 300
_FRAME = re.compile(r'^(?:\(.*?\) ERROR .*?\] )?  (?:File "|\s*[\^~]+$)')  # a traceback frame, its carets


def scrub(lines: list[str]) -> list[str]:
    seen = dict.fromkeys(_REPEATED, 0)
    out = []
    in_frame = False  # the source line after a dropped frame line goes too
    for raw in lines:
        line = _ANSI.sub("", raw.rstrip("\n"))
        if _FRAME.match(line) or (in_frame and re.match(r"^(?:\(.*?\) ERROR .*?\] )?    ", line)):
            in_frame = True
            continue
        in_frame = False
        for pattern, replacement in _PATHS:
            line = pattern.sub(replacement, line)
        kind = next((k for k in _REPEATED if k in line), None)
        if kind is not None:
            seen[kind] += 1
            if seen[kind] > _KEEP_REPEATED:
                continue
        out.append(line[:_LINE_LIMIT])
    return out


def capture(argv: list[str], ready: str, timeout: float) -> list[str]:
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        if ready in line or time.monotonic() > deadline:
            break
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # SGLang's scheduler ignores SIGTERM
        proc.wait()
    return lines


if __name__ == "__main__":
    out, ready, seconds, *engine = sys.argv[1:]
    with open(out, "w", encoding="utf-8") as handle:
        handle.write("\n".join(scrub(capture(engine, ready, float(seconds)))) + "\n")
