"""Engine flags as data: recipe mappings -> argv tokens, and the explicit merge of LLMD_EXTRA_ARGS.

Commands stay argv lists end to end; JSON values are built here and passed as one argument.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from launcher.config.recipe import ArgValue
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.record import record
from launcher.contract.redact import is_secret_flag

Style = Literal["gnu", "gflags"]  # vLLM/SGLang: --flag value; Mooncake (gflags): --flag=value


def to_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return to_json(value)
    return str(value)


def flag_key(flag: str) -> str:
    """Identity of a flag for merging: dashes, underscores and a `no-` prefix do not matter."""
    name = flag.lstrip("-").split("=", 1)[0].replace("_", "-")
    return name.removeprefix("no-")


def flag_values(argv: Sequence[str], flag: str) -> list[str]:
    """Every value an argv gives `flag`, in order (argparse keeps the last): `--flag value` and
    `--flag=value`, `_` and `-` alike (vLLM and SGLang read both). A flag followed by another flag,
    or last, has no value."""
    name = flag.lstrip("-").replace("_", "-")
    out = []
    for i, token in enumerate(argv):
        given, eq, value = token.partition("=")
        if not given.startswith("--") or given[2:].replace("_", "-") != name:
            continue
        if eq:
            out.append(value)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append(argv[i + 1])
    return out


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value the engine reads for `flag` (the last one given), None when none is."""
    values = flag_values(argv, flag)
    return values[-1] if values else None


@record
class Arg:
    """One flag and the tokens it occupies on the argv."""

    key: str
    tokens: tuple[str, ...]


def no_form(flag: str) -> str:
    """How a `false` switch is written when the engine's catalogue says nothing else: argparse's
    BooleanOptionalAction form (vLLM 0.32: --no-enable-prefix-caching)."""
    return f"no-{flag}"


def arg(
    flag: str, value: ArgValue = True, style: Style = "gnu", off: Callable[[str], str] = no_form
) -> list[Arg]:
    """Render one flag; [] when the value is None (omitted). off: the flag that turns a switch off
    (roles/flags.py off_switch: the form the engine in use accepts); the key stays the recipe's flag."""
    if value is None:
        return []
    if style == "gflags":
        return [Arg(flag_key(flag), (f"--{flag}={_scalar(value)}",))]
    if value is True:
        return [Arg(flag_key(flag), (f"--{flag}",))]
    if value is False:
        return [Arg(flag_key(flag), (f"--{off(flag)}",))]
    if isinstance(value, list):
        return [Arg(flag_key(flag), (f"--{flag}", *(_scalar(v) for v in value)))]
    return [Arg(flag_key(flag), (f"--{flag}", _scalar(value)))]


def args_from(
    mapping: Mapping[str, ArgValue], style: Style = "gnu", off: Callable[[str], str] = no_form
) -> list[Arg]:
    return [a for flag, value in mapping.items() for a in arg(flag, value, style, off)]


_NUMBER = re.compile(r"^-(\d+|\d*\.\d+)$")  # argparse's own test for a negative number


def split_extra_args(text: str, setting: str) -> list[Arg]:
    """LLMD_EXTRA_ARGS tokenised like a shell would (no shell runs) and grouped flag by flag."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ConfigError.one(
            setting, f"cannot be split into arguments ({exc})", "balance the quotes"
        ) from None
    if any("\0" in token for token in tokens):
        raise ConfigError.one(setting, "holds a NUL byte, which no command line can carry", "remove it")
    groups: list[Arg] = []
    for token in tokens:
        if token.startswith("-") and not _NUMBER.match(token):
            groups.append(Arg(flag_key(token), (token,)))
        elif groups:
            groups[-1] = Arg(groups[-1].key, (*groups[-1].tokens, token))
        else:
            raise ConfigError.one(
                setting, f"starts with {token!r}, which is not a flag", "give flags such as --max-num-seqs 64"
            )
    return groups


def extra_arg_values(text: str, setting: str) -> dict[str, ArgValue]:
    """LLMD_EXTRA_ARGS as a recipe's args mapping (flag_key -> value), for what reads the pool's args
    (the host-memory count): a bare flag is true, its `no-` form false, one value a string."""
    values: dict[str, ArgValue] = {}
    for group in split_extra_args(text, setting):
        head, eq, inline = group.tokens[0].partition("=")
        given = [inline] if eq else list(group.tokens[1:])
        negated = head.lstrip("-").replace("_", "-").startswith("no-")
        values[group.key] = (not negated) if not given else given[0] if len(given) == 1 else given
    return values


def merge_extra(
    generated: list[Arg], extra: list[Arg], owned: Mapping[str, str], setting: str
) -> tuple[list[Arg], list[str]]:
    """Append extra args last; an extra flag replaces the recipe's flag of the same name (the engine
    would otherwise see both and silently keep the last). Flags the launcher derives are refused."""
    notes: list[str] = []
    problems = []
    for extra_arg in extra:
        flag = extra_arg.tokens[0].split("=", 1)[0]  # never echo a value: it may be the secret
        if is_secret_flag(extra_arg.key):
            problems.append(
                Problem(
                    setting,
                    f"{flag} would put a secret on the command line",
                    "pass it in the env from a Secret",
                )
            )
        elif extra_arg.key in owned:
            problems.append(Problem(setting, f"{flag} is derived by the launcher", owned[extra_arg.key]))
    if problems:
        raise ConfigError(problems)
    keys = {a.key for a in extra}
    kept = []
    for a in generated:
        if a.key in keys:
            replacement = next(e for e in extra if e.key == a.key)
            notes.append(f"{setting}: {' '.join(replacement.tokens)} replaces {' '.join(a.tokens)}")
        else:
            kept.append(a)
    return kept + extra, notes


def flatten(args: Iterable[Arg]) -> tuple[str, ...]:
    return tuple(token for a in args for token in a.tokens)
