"""Env variables an llm-d guide's launch script reads to write the engine's command line, which no
engine reads. The launcher writes that command itself, so a guide component that sets one would
change nothing: the wide-EP DeepSeek-V4 guide's script takes `--moe-backend "${MOE_BACKEND:-...}"` and
`--all2all-backend ${ALL2ALL_BACKEND}` (llm-d/llm-d guides/models/deepseek-v4/modelserver/gpu/vllm/
base/disaggregatedset.yaml @6b047cfb), and its alternative-backend components set only that env."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from launcher.contract.errors import Problem

SCRIPT_HOOKS = {"MOE_BACKEND": "--moe-backend", "ALL2ALL_BACKEND": "--all2all-backend"}


def script_hook_problems(env: Mapping[str, str]) -> list[Problem]:
    """A hook set in the pod's env: refused with the flag that does what the guide's script did."""
    return [
        Problem(
            name,
            f"is {env[name]!r}, a guide launch script's variable for {flag}, which the launcher "
            "(writing the engine's command itself) does not read",
            f"give the flag instead: LLMD_EXTRA_ARGS={shlex.quote(f'{flag} {env[name]}')}",
        )
        for name, flag in SCRIPT_HOOKS.items()
        if env.get(name)
    ]
