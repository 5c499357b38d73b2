"""The severity of a child's output line, read from the engine's own level prefix, so the launcher's
and its children's JSON lines share one schema (`severity` as Cloud Logging's LogSeverity names it,
which GKE's agent and most collectors read). Pure: a line in, a name out.

The prefixes, as the engines print them:
- vLLM 0.32 (`vllm/logger.py` _FORMAT): `(APIServer pid=7) INFO 12-01 16:49:25 [api_server.py:1] ...`
- uvicorn, inside vLLM and SGLang (`uvicorn/logging.py` levelprefix): `INFO:     127.0.0.1 - "GET /health"`,
  after SGLang's `[2026-12-01 16:49:25] ` (`sglang/srt/utils/common.py`, 0.5.23)
- glog, Mooncake's C++ (`mooncake_master`, `mooncake_client`): `I1201 16:49:25.123456 7 master.cpp:1] ...`
- a Python traceback's first line.
SGLang's own records carry no level (`[%(asctime)s] %(message)s`): DEFAULT, as any unprefixed line.
"""

from __future__ import annotations

import re

DEFAULT = "DEFAULT"  # LogSeverity for "no level known"
_NAMES = {"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARNING", "WARN": "WARNING", "ERROR": "ERROR",
          "CRITICAL": "CRITICAL", "FATAL": "CRITICAL"}  # fmt: skip
_GLOG = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}

_WORD_LEVEL = re.compile(
    r"^(?:\([^)]*pid=\d+\)\s+)?"  # vLLM's (process pid=N)
    r"(?:\[[^\]]*\]\s+)?"  # SGLang's [time] or [time TP0]
    r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?::|\s)"
)
_GLOG_LEVEL = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s")


def severity_of(line: str) -> str:
    if match := _WORD_LEVEL.match(line):
        return _NAMES[match.group(1)]
    if match := _GLOG_LEVEL.match(line):
        return _GLOG[match.group(1)]
    if line.startswith("Traceback (most recent call last)"):
        return "ERROR"
    return DEFAULT


def launcher_severity(level: str) -> str:
    """structlog's method name (info, warning, ...) as the same LogSeverity name."""
    return _NAMES.get(level.upper(), DEFAULT)
