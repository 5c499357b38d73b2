"""Shared by the catalogue generators (run inside an engine venv, no launcher imports): argparse
actions -> {option string: {"value": kind or null, "choices": [...]}}."""

import argparse
import json
import sys

JSON_TYPES = {"loads", "parse_dataclass"}  # vLLM: a JSON object (or dataclass JSON) is required


def value_kind(action: argparse.Action) -> str | None:
    if action.nargs == 0:
        return None  # a switch: takes no value
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        return "list"
    kind = action.type
    inner = None
    if kind is not None and getattr(kind, "__name__", "") == "_optional_type":
        cells = [c.cell_contents for c in (kind.__closure__ or ())]
        inner = next((c for c in cells if callable(c)), None)
    for candidate, suffix in ((kind, ""), (inner, "?")):
        if candidate is int:
            return "int" + suffix
        if candidate is float:
            return "float" + suffix
        if getattr(candidate, "__name__", "") in JSON_TYPES:
            return "json" + suffix
    return "str"


def catalog(parser: argparse.ArgumentParser, engine: str, version: str, underscores: bool) -> dict:
    """underscores: the engine's parser also accepts --max_num_seqs (vLLM's FlexibleArgumentParser)."""
    flags = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        entry = {"value": value_kind(action)}
        if action.nargs == "?":
            entry["optional"] = True  # the value may be left out
        if action.choices is not None and not isinstance(action.choices, dict):
            entry["choices"] = sorted(str(c) for c in action.choices)
        for option in action.option_strings:
            flags[option] = entry
    return {
        "engine": engine,
        "version": version,
        "underscores": underscores,
        "flags": dict(sorted(flags.items())),
    }


def emit(data: dict) -> None:
    json.dump(data, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
