"""Engine flags checked before anything starts: a misspelt flag, a value outside its choices or
malformed JSON fails here in milliseconds instead of after the engine's import and model load.

The catalogues (launcher/catalogs/*.json) are generated from the engines' own parsers by
scripts/update-flag-catalogs.sh; the engine tier fails when they drift from the installed engines.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from launcher.errors import Problem
from roles.args import Arg

SKIP_FIX = "fix it, or set LLMD_CHECK_FLAGS=false if the image runs a newer engine than the catalogue"


@dataclass(frozen=True)
class FlagCatalog:
    engine: str
    version: str
    flags: dict[str, dict[str, Any]]

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}"


@cache
def load_catalog(name: str) -> FlagCatalog:
    text = resources.files("launcher").joinpath("catalogs", f"{name}.json").read_text(encoding="utf-8")
    data = json.loads(text)
    return FlagCatalog(data["engine"], data["version"], data["flags"])


def check_flags(catalog: FlagCatalog, args: list[Arg], setting: str) -> list[Problem]:
    return [p for a in args if (p := _check_one(catalog, a, setting)) is not None]


def _check_one(catalog: FlagCatalog, item: Arg, setting: str) -> Problem | None:
    head, has_eq, inline = item.tokens[0].partition("=")
    values = [inline] if has_eq else list(item.tokens[1:])
    flag = "--" + head.lstrip("-").replace("_", "-")  # the engines accept --max_num_seqs too
    base, dotted, _ = flag.partition(".")  # vLLM: --compilation-config.mode 3 sets one JSON key
    info = catalog.flags.get(base)
    if info is None:
        close = difflib.get_close_matches(base, catalog.flags, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return Problem(setting, f"{head} is not a {catalog.label} flag{hint}", SKIP_FIX)
    kind = info.get("value")
    if dotted:
        if kind is None or not kind.startswith("json"):
            return Problem(setting, f"{head}: {base} takes no JSON keys", SKIP_FIX)
        return None
    if kind is None:
        if values:
            return Problem(setting, f"{head} is a switch and takes no value (got {len(values)})", SKIP_FIX)
        return None
    if not values:
        return Problem(setting, f"{head} needs a value", SKIP_FIX)
    if kind == "list":
        return None
    if len(values) > 1:
        return Problem(setting, f"{head} takes one value (got {len(values)})", SKIP_FIX)
    return _check_value(catalog, head, kind, info.get("choices"), values[0], setting)


def _check_value(
    catalog: FlagCatalog, head: str, kind: str, choices: list[str] | None, value: str, setting: str
) -> Problem | None:
    if kind.endswith("?") and value in ("", "None"):
        return None
    kind = kind.rstrip("?")
    if choices is not None and value not in choices:
        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
        return Problem(
            setting, f"{head} {value!r} is not one of {catalog.label}'s choices{hint}: {shown}", SKIP_FIX
        )
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "json":
            json.loads(value)
    except ValueError as exc:
        what = {"int": "an integer", "float": "a number", "json": "valid JSON"}[kind]
        detail = f" ({exc})" if kind == "json" else ""
        # A JSON value is config, not a credential (secret flags are refused earlier): safe to cite.
        return Problem(setting, f"{head} needs {what}, got {value[:60]!r}{detail}", SKIP_FIX)
    return None
