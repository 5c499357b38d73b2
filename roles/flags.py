"""Engine flags checked before anything starts: a misspelt flag, a value outside its choices or
malformed JSON fails here in milliseconds instead of after the engine's import and model load.

The catalogues are generated from the engines' own parsers by `llm-d-launcher catalog build`
(launcher/catalogs/): the images build theirs from the engine they install (LLMD_CATALOG_DIR), and
roles/catalogs/<name>-<version>.json are the built-in fallback; the engine tier fails when those drift
from the installed engines. The pod's catalogue is the one whose version equals its engine's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from functools import cache
from importlib import resources
from typing import Any

from launcher.contract.errors import Problem
from launcher.contract.record import record
from launcher.contract.redact import flag_name, is_secret_flag
from roles.args import Arg, no_form

SKIP_FIX = (
    "fix it; for a flag the engine in the image has and the catalogue lacks, name it in LLMD_ALLOW_FLAGS"
)
# A known flag's value or form is wrong: LLMD_ALLOW_FLAGS lets through unknown flags only, so it is no fix.
VALUE_FIX = (
    "fix it; if the engine in the image takes it, build the image's catalogue (llm-d-launcher catalog build)"
)
BUILT_IN = "built-in"  # FlagCatalog.source of the catalogues shipped in roles/catalogs/


@record
class FlagCatalog:
    name: str  # the family's catalogue name (EngineFamily.catalog), e.g. vllm-serve
    engine: str
    version: str
    underscores: bool  # the engine also accepts --max_num_seqs
    flags: dict[str, dict[str, Any]]
    source: str = BUILT_IN  # or the file an image built (`llm-d-launcher catalog build`)

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}"


def file_name(name: str, version: str) -> str:
    """<catalogue>-<engine version>.json, built-in and image-built alike."""
    return f"{name}-{version}.json"


def parse_catalog(name: str, text: str, source: str) -> FlagCatalog:
    data = json.loads(text)
    return FlagCatalog(name, data["engine"], data["version"], data["underscores"], data["flags"], source)


@cache
def load_catalog(name: str, version: str) -> FlagCatalog:
    """A built-in catalogue (roles/catalogs/)."""
    text = (resources.files("roles") / "catalogs" / file_name(name, version)).read_text(encoding="utf-8")
    return parse_catalog(name, text, BUILT_IN)


@cache
def built_in_catalogs() -> tuple[FlagCatalog, ...]:
    found = []
    for entry in (resources.files("roles") / "catalogs").iterdir():
        stem = entry.name.removesuffix(".json")
        if entry.name.endswith(".json") and "-" in stem:
            name, _, version = stem.rpartition("-")
            found.append(load_catalog(name, version))
    return tuple(sorted(found, key=lambda c: (c.name, c.version)))


def choose_catalog(
    shelf: Sequence[FlagCatalog],
    name: str,
    installed: str | None,
    default_version: str,
    wanted: str | None = None,
) -> FlagCatalog:
    """The catalogue of the engine version installed (a local label such as +cpu does not change the
    flags), the shelf's first (image-built) on a tie; without one, what the image built, else the
    newest one the pool's `engine_versions` (`wanted`) admits, else the built-in default. A mismatch
    left over is preflight's warning (launcher/supervise/host/packages.py) and catalog_warning's."""
    candidates = [c for c in shelf if c.name == name]
    release = installed.split("+")[0] if installed else None
    same = [c for c in candidates if c.version == release]
    built = [c for c in candidates if c.source != BUILT_IN]
    admitted = sorted(admitted_by(wanted, candidates), key=lambda c: version_key(c.version), reverse=True)
    return (same or built or admitted or [load_catalog(name, default_version)])[0]


def admitted_by(wanted: str | None, catalogs: Sequence[FlagCatalog]) -> list[FlagCatalog]:
    """The catalogues whose engine version a version specifier (a pool's engine_versions) admits."""
    if wanted is None:
        return []
    from packaging.specifiers import SpecifierSet  # only a pool that states engine_versions pays

    spec = SpecifierSet(wanted)
    return [c for c in catalogs if spec.contains(c.version, prereleases=True)]


def version_key(version: str) -> tuple[int, ...]:
    """A release as numbers (0.5.22 after 0.5.3), for picking the newest catalogue."""
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def catalog_warning(catalog: FlagCatalog, pool: str, wanted: str | None) -> str | None:
    """A plan note when the catalogue the flags are checked against is outside the pool's
    engine_versions: no built-in or image catalogue matches the release the recipe was written for."""
    if wanted is None or admitted_by(wanted, [catalog]):
        return None
    return (
        f"pool {pool}'s engine_versions {wanted!r} admits no flag catalogue here; its flags are checked "
        f"against {catalog.label} ({catalog.source}), which its engine would not be: build the "
        "engine's catalogue (llm-d-launcher catalog build) or choose one with plan --engine-version"
    )


# vLLM 0.33 pairs --enable-X with --disable-X (EnableDisableAction, vllm/utils/argparse_utils.py): its
# parser still reads 0.32's --no-enable-X / --no-disable-X but hides them (not in its help, nor in the
# catalogue), so a recipe `false` takes the other half of the pair, the form the engine documents.
_PAIRS = (("enable-", "disable-"), ("disable-", "enable-"))


def off_switch(catalog: FlagCatalog | None, flag: str) -> str:
    """The flag (without --) that turns the switch `flag` off on this catalogue's engine: --no-X where
    the catalogue has it (vLLM 0.32 and any BooleanOptionalAction), else the other half of a vLLM 0.33
    --enable-X/--disable-X pair; else --no-X, which check_flags refuses with the fix."""
    if catalog is None:
        return no_form(flag)
    name = flag.replace("_", "-") if catalog.underscores else flag
    if f"--{no_form(name)}" in catalog.flags or f"--{name}" not in catalog.flags:
        return no_form(flag)
    for prefix, other in _PAIRS:
        paired = other + name.removeprefix(prefix)
        if name.startswith(prefix) and f"--{paired}" in catalog.flags:
            return paired
    return no_form(flag)


def switch_key(catalog: FlagCatalog | None, key: str) -> str:
    """One merge identity for both halves of a vLLM 0.33 pair (roles/args.py flag_key already joins
    --X and --no-X): an LLMD_EXTRA_ARGS --disable-X replaces the recipe's enable-X."""
    if catalog is not None and key.startswith("disable-"):
        enable = "enable-" + key.removeprefix("disable-")
        if off_switch(catalog, enable) == key:
            return enable
    return key


def check_flags(
    catalog: FlagCatalog, args: list[Arg], setting: str, allowed: Collection[str] = ()
) -> list[Problem]:
    """allowed: flags the catalogue does not know that the operator lets through (LLMD_ALLOW_FLAGS);
    only unknown ones, so a known flag's value is still checked."""
    return [p for a in args if (p := _check_one(catalog, a, setting, allowed)) is not None]


@cache
def known_secret_flags() -> frozenset[str]:
    """Every secret flag of every built-in catalogue: what a pool without a catalogue of its own (the
    Mooncake binaries) is checked against, so its printed argv never shows one under an abbreviation."""
    return frozenset(f for c in built_in_catalogs() for f in c.flags if is_secret_flag(f))


def check_secret_abbreviations(known: Collection[str], args: list[Arg], setting: str) -> list[Problem]:
    """Checked first and never allowed (LLMD_ALLOW_FLAGS): argparse expands `--hf-t` to --hf-token,
    so a secret would reach the command line under a name no word list recognises. known: the engine's
    flags (its catalogue), or known_secret_flags(). Never echoes the value."""
    problems = []
    for item in args:
        head = item.tokens[0]
        name = "--" + flag_name(head)
        if head.startswith("--") and not is_secret_flag(head) and name not in known:
            secret = sorted(f for f in known if f.startswith(name) and is_secret_flag(f))
            if secret:
                flag = head.split("=", 1)[0]
                problems.append(
                    Problem(
                        setting,
                        f"{flag} abbreviates {secret[0]}, a secret",
                        "pass it in the env from a Secret",
                    )
                )
    return problems


def _lookup(catalog: FlagCatalog, head: str) -> tuple[str, dict[str, Any] | None, list[str]]:
    """The catalogue entry for a flag as written, and any value attached to a short option (-O3)."""
    if head.startswith("--"):
        name = "--" + head[2:].replace("_", "-") if catalog.underscores else head
        return name, catalog.flags.get(name.partition(".")[0]), []
    if head in catalog.flags:
        return head, catalog.flags[head], []
    short = head[:2]
    if short in catalog.flags and len(head) > 2:  # argparse: -q fp8 may be written -qfp8
        return short, catalog.flags[short], [head[2:]]
    return head, None, []


def _check_one(catalog: FlagCatalog, item: Arg, setting: str, allowed: Collection[str]) -> Problem | None:
    head, has_eq, inline = item.tokens[0].partition("=")
    flag, info, attached = _lookup(catalog, head)
    values = [*attached, *([inline] if has_eq else []), *item.tokens[1:]]
    base, dotted, _ = flag.partition(".")  # vLLM: --compilation-config.mode 3 sets one JSON key
    if info is None:
        return None if base in allowed else _unknown(catalog, head, base, setting)
    kind = info.get("value")
    if dotted:
        if kind is None or not kind.startswith("json"):
            return Problem(setting, f"{head}: {base} takes no JSON keys", VALUE_FIX)
        return None
    if kind is None:
        if values:
            return Problem(setting, f"{head} is a switch and takes no value (got {len(values)})", VALUE_FIX)
        return None
    if not values:
        return None if info.get("optional") else Problem(setting, f"{head} needs a value", VALUE_FIX)
    if kind == "list":  # each item against the choices (SGLang's --lora-target-modules has them)
        return next(
            (p for v in values if (p := _check_value(catalog, head, "str", info.get("choices"), v, setting))),
            None,
        )
    if len(values) > 1:
        hint = "; write a JSON list as one quoted value" if kind.startswith("json") else ""
        return Problem(setting, f"{head} takes one value (got {len(values)}){hint}", VALUE_FIX)
    return _check_value(catalog, head, kind, info.get("choices"), values[0], setting) or _check_rule(
        catalog, head, kind, info, values[0], setting
    )


_BOUNDS = {
    "gt": (float.__gt__, ">"),
    "ge": (float.__ge__, ">="),
    "lt": (float.__lt__, "<"),
    "le": (float.__le__, "<="),
}


def _check_rule(
    catalog: FlagCatalog, head: str, kind: str, info: dict[str, Any], value: str, setting: str
) -> Problem | None:
    """What the engine's own config classes validate beyond argparse, as its catalogue recorded it
    (launcher/catalogs/generate.py): a number's bounds, a JSON config key's choices. Found here, not
    after the image pull and scheduling on a GPU node."""
    rule, keys = info.get("rule"), info.get("keys")
    if kind.endswith("?") and value in ("", "None"):
        return None
    field = head.lstrip("-").replace("-", "_")
    number = _plain_number(value) if rule and kind.rstrip("?") in ("int", "float", *SIZES) else None
    if rule and number is not None:
        for bound, limit in rule.items():
            if bound in _BOUNDS and not _BOUNDS[bound][0](number, float(limit)):
                return _broken(
                    catalog, f"{head} {value}", f"{field} {_BOUNDS[bound][1]} {limit:g}", rule, setting
                )
    if keys and kind.startswith("json"):
        config = json.loads(value)
        for key, key_rule in keys.items():
            given = config.get(key) if isinstance(config, dict) else None
            if given is not None and "choices" in key_rule and str(given) not in key_rule["choices"]:
                import difflib

                close = difflib.get_close_matches(str(given), key_rule["choices"], n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]}?)" if close else ""
                allowed = f"{key} one of {', '.join(key_rule['choices'])}"
                return _broken(catalog, f"{head} {key} {str(given)[:40]!r}{hint}", allowed, key_rule, setting)
    return None


def _plain_number(value: str) -> float | None:
    """A value written as a plain number (a suffixed size such as 8k is never below 1)."""
    try:
        return float(value)
    except ValueError:
        return None


def _broken(catalog: FlagCatalog, what: str, requirement: str, rule: dict[str, Any], setting: str) -> Problem:
    return Problem(
        setting,
        f"{what}: {catalog.label} requires {requirement} ({rule['source']})",
        "fix the value: the engine refuses it at start-up, after the image pull and scheduling",
    )


def _unknown(catalog: FlagCatalog, head: str, base: str, setting: str) -> Problem:
    switch = "--" + base.removeprefix("--no-")
    if base.startswith("--no-") and catalog.flags.get(switch, {"value": ""}).get("value") is None:
        if (off := "--" + off_switch(catalog, switch[2:])) != base:
            return Problem(
                setting,
                f"{head}: {catalog.label} turns {switch} off with {off}",
                f"write {off} (a recipe `{switch[2:]}: false` renders it)",
            )
        return Problem(
            setting,
            f"{head}: {switch} has no --no- form in {catalog.label} (a recipe `false` writes one)",
            f"leave {switch} out to keep it off",
        )
    expansions = [f for f in catalog.flags if f.startswith(base)] if base.startswith("--") else []
    if len(expansions) == 1:  # argparse would take it; a future flag would make it ambiguous
        return Problem(
            setting,
            f"{head} is an abbreviation of {expansions[0]}",
            "write the full flag: abbreviations change meaning when the engine adds flags",
        )
    import difflib  # for the hint only: a plan with valid flags never loads it

    close = difflib.get_close_matches(base, catalog.flags, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return Problem(setting, f"{head} is not a {catalog.label} flag{hint}", SKIP_FIX)


def _check_value(
    catalog: FlagCatalog, head: str, kind: str, choices: list[str] | None, value: str, setting: str
) -> Problem | None:
    if kind.endswith("?") and value in ("", "None"):
        return None
    kind = kind.rstrip("?")
    if choices is not None and value not in choices:
        import difflib

        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
        return Problem(
            setting, f"{head} {value!r} is not one of {catalog.label}'s choices{hint}: {shown}", VALUE_FIX
        )
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "json":
            json.loads(value)
        elif kind in SIZES:
            check_size(kind, value)
    except (ValueError, RecursionError) as exc:
        if kind == "json":  # only where it breaks: a JSON config may embed credentials
            problem = "is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            return Problem(setting, f"{head} needs valid JSON ({problem})", VALUE_FIX)
        what = SIZES[kind][1] if kind in SIZES else "an integer" if kind == "int" else "a number"
        return Problem(setting, f"{head} needs {what}, got {value[:40]!r}", VALUE_FIX)
    return None


# A human-readable integer kind, named by its syntax (launcher/catalogs/generate.py gives each
# engine's parser its own) -> its suffixed forms, what it is.
SIZES = {
    "int-kmgt": (re.compile(r"\d+(?:\.\d+)?[kmgt]|\d+[KMGT]"), "an integer (k/m/g/t or K/M/G/T suffix)"),
    "int-kmgt-or-auto": (
        re.compile(r"\d+(?:\.\d+)?[kmgt]|\d+[KMGT]|-1|[aA][uU][tT][oO]"),
        "an integer (k/m/g/t or K/M/G/T suffix), -1 or auto",
    ),
    "int-si-iec": (
        re.compile(r"\d+(?:\.\d+)?[kMGT]|\d+[KMGT]i"),
        "an integer (k/M/G/T or Ki/Mi/Gi/Ti suffix)",
    ),
}


def check_size(kind: str, value: str) -> None:
    """ValueError unless the engine's human-readable integer parser takes value: a suffixed number
    (no decimals with a binary suffix), else a plain integer as int() reads it. vLLM's
    human_readable_int[_or_auto] (vllm/utils/argparse_utils.py, 0.32.0 and 0.33.0), SGLang's
    human_readable_int (sglang/srt/utils/common.py, 0.5.22 and 0.5.23)."""
    value = value.strip()
    if not SIZES[kind][0].fullmatch(value):
        int(value)
