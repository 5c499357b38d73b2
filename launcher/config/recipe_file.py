"""Reading a recipe: a file's YAML parsed within bounds (launcher/config/recipe_yaml.py) and validated
by the schema, or a built-in recipe as compiled with the package.

The built-in recipes are trusted data shipped in the package: each `recipes/NAME.yaml` (what people
read, edit and `recipes show`) is compiled by scripts/compile_recipes.py to `recipes/NAME.json` (its
mapping) and `recipes/validated/NAME.json` (the `Recipe` the schema validated from it,
launcher/config/validated.py), and a test checks both agree with the YAML. So a dry-run of a built-in
recipe neither imports PyYAML (its import compiles a large Unicode regex: ~10 ms) nor builds the
schema's validator (~4 ms), bench/results/plan_speed.md.
"""

import functools
import json
import os
import re
from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from launcher.config.recipe import POOL_KINDS, Recipe, json_schema
from launcher.config.recipe_source import RecipeSource as RecipeSource  # re-exported: where readers look
from launcher.contract.errors import ConfigError, Problem

if TYPE_CHECKING:  # importlib.abc's name until 3.11; importlib.resources.abc's after
    from importlib.abc import Traversable

SCHEMA_FIX = "correct the recipe (its keys and types: `llm-d-launcher recipes schema`)"
MAX_RECIPE_BYTES = 1 << 20  # a recipe is a page of YAML; a ConfigMap holds at most 1 MiB


def _recipes() -> "Traversable":
    return resources.files("launcher.config").joinpath("recipes")


def builtin_recipe_names() -> list[str]:
    return sorted(f.name.removesuffix(".yaml") for f in _recipes().iterdir() if f.name.endswith(".yaml"))


@functools.lru_cache(maxsize=8)
def read_recipe(source: RecipeSource) -> Mapping[str, Any]:
    """The raw mapping of a recipe. Cached: the settings (its `launcher:` section) and the recipe
    itself are both read from it, and a mounted file is read once per process."""
    if source.file is not None:
        try:
            raw = _read_at_most(source.file, MAX_RECIPE_BYTES + 1)
        except OSError as exc:
            raise ConfigError.one(
                source.setting,
                f"cannot read {source.label} ({exc.strerror})",
                "mount the recipe file or fix the path",
            ) from None
        if len(raw) > MAX_RECIPE_BYTES:
            raise ConfigError.one(
                source.setting,
                f"{source.label} is too large (over {MAX_RECIPE_BYTES} bytes)",
                "trim the recipe",
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError.one(
                source.setting, f"{source.label} is not UTF-8 text", "save it as UTF-8"
            ) from None
        from launcher.config.recipe_yaml import parse_recipe_yaml

        return parse_recipe_yaml(text, source)
    builtin_recipe_text(source.name)  # an unknown name is refused, naming the recipes there are
    data: dict[str, Any] = json.loads(_recipes().joinpath(f"{source.name}.json").read_text(encoding="utf-8"))
    return data


def _read_at_most(path: str, limit: int) -> bytes:
    """Up to `limit` bytes of the file, so the size bound holds before anything is held in memory (a
    device such as /dev/zero never ends). Opened non-blocking: a FIFO no one writes to is an empty
    file, not a wait for ever (open(2) blocks on one otherwise; fifo(7)); then blocking again, so a pipe
    that has a writer (`--recipe-file <(...)`) is read to its end."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
        os.set_blocking(handle.fileno(), True)
        return handle.read(limit)


def builtin_recipe_text(name: str) -> str:
    """A built-in recipe's YAML as shipped (`recipes show NAME` prints it to copy)."""
    names = builtin_recipe_names()
    if name not in names:
        raise ConfigError.one(
            "LLMD_RECIPE",
            f"unknown recipe {name!r}",
            f"use one of {', '.join(names)} or set LLMD_RECIPE_FILE",
        )
    return _recipes().joinpath(f"{name}.yaml").read_text(encoding="utf-8")


def _problem_path(loc: tuple[int | str, ...]) -> str:
    """pools.prefill.vllm.port -> pools.prefill.port; args.x.<anything deeper> -> args.x."""
    parts = [str(p) for p in loc if not str(p).startswith("function-after")]
    parts = [p for p in parts if p not in POOL_KINDS]
    return ".".join(parts) or "<top>"


def _keys_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the schema allows in the mapping at `loc` (a pydantic error location), or none when
    the location leads nowhere the schema names."""
    schema = json_schema()
    defs = schema["$defs"]

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while True:
            if "$ref" in node:
                node = defs[node["$ref"].rsplit("/", 1)[-1]]
            elif "anyOf" in node:  # `X | None`: the mapping part
                node = next((n for n in node["anyOf"] if n.get("type") != "null"), {})
            else:
                return node

    node = schema
    for part in (str(p) for p in loc if not str(p).startswith("function-")):
        node = resolve(node)
        if part in node.get("properties", {}):
            node = node["properties"][part]
        elif "allOf" in node:  # a pool (recipe._branch_on_kind): pydantic's location names its kind
            branches = {b["if"]["properties"]["kind"]["const"]: b["then"] for b in node["allOf"] if "if" in b}
            if part not in branches:
                return []
            node = branches[part]
        elif isinstance(node.get("additionalProperties"), dict):  # a mapping's own key (a pool's name)
            node = node["additionalProperties"]
        else:
            return []
    return sorted(resolve(node).get("properties", {}))


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """Names the key that was probably meant, or the keys allowed there; never a value."""
    valid = _keys_at(loc[:-1])
    import difflib  # for the hint only: a valid recipe never loads it

    close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
    if close:
        return f"unknown key (did you mean {close[0]}?)"
    return f"unknown key (valid keys: {', '.join(valid)})" if valid else "unknown key"


# pydantic's errors about a typed field's own value (never args, env or a JSON config: those
# report their own, and may hold a secret), which say nothing of what was written.
_ECHOED = {"int_parsing", "float_parsing", "bool_parsing", "int_type", "float_type", "literal_error"}


def _as_written(err: Any) -> str:
    """The value as the recipe wrote it (`yes`, not 1), and for a choice the one probably meant."""
    value = err.get("input")
    if err["type"] not in _ECHOED or not isinstance(value, (str, int, float)) or len(str(value)) > 40:
        return ""
    shown = f" (got {value!r}"
    expected = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
    if err["type"] == "literal_error" and expected:
        import difflib  # for the hint only: a valid recipe never loads it

        close = difflib.get_close_matches(str(value), expected, n=1, cutoff=0.6)
        shown += f"; did you mean {close[0]!r}?" if close else ""
    return shown + ")"


def validate_recipe(data: Mapping[str, Any], source: RecipeSource) -> Recipe:
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        problems: dict[str, Problem] = {}
        for err in exc.errors(include_url=False):
            where = _problem_path(err["loc"])
            if err["type"] == "extra_forbidden":
                msg = _unknown_key(err["loc"])
            else:
                msg = err["msg"].removeprefix("Value error, ") + _as_written(err)
            problems.setdefault(where, Problem(source.setting, f"{source.label}: {where}: {msg}", SCHEMA_FIX))
        raise ConfigError(list(problems.values())) from None


def load_recipe(source: RecipeSource, name_given: bool = False) -> Recipe:
    """The recipe a pod runs: the user file when given, else the built-in recipe by name."""
    if source.file is None:
        return _builtin_recipe(source.name)
    recipe = validate_recipe(read_recipe(source), source)
    if name_given and recipe.name != source.name:
        raise ConfigError.one(
            "LLMD_RECIPE",
            f"is {source.name!r} but LLMD_RECIPE_FILE holds recipe {recipe.name!r}",
            "unset one of them",
        )
    return recipe


def _builtin_recipe(name: str) -> Recipe:
    """A built-in recipe as the schema validated it when the package was built (the module's doc)."""
    from launcher.config.validated import load_validated

    builtin_recipe_text(name)  # an unknown name is refused, naming the recipes there are
    data = json.loads(_recipes().joinpath("validated").joinpath(f"{name}.json").read_text(encoding="utf-8"))
    recipe = load_validated(data)
    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipes/validated/{name}.json holds no recipe: run scripts/compile_recipes.py")
    return recipe


def compiled_builtin(name: str) -> str:
    """A built-in recipe's YAML as the JSON the package ships (recipes/NAME.json), checked as a recipe
    file would be: scripts/compile_recipes.py writes it, a test keeps it equal to the YAML."""
    from launcher.config.recipe_yaml import parse_recipe_yaml

    data = parse_recipe_yaml(builtin_recipe_text(name), RecipeSource(name, None))
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def validated_builtin(name: str) -> str:
    """A built-in recipe's YAML validated by the schema, as the JSON the package ships
    (recipes/validated/NAME.json, launcher/config/validated.py): scripts/compile_recipes.py writes it,
    a test keeps it equal to validating the YAML."""
    from launcher.config.recipe_yaml import parse_recipe_yaml
    from launcher.config.validated import dump_validated

    source = RecipeSource(name, None)
    recipe = validate_recipe(parse_recipe_yaml(builtin_recipe_text(name), source), source)
    return json.dumps(dump_validated(recipe), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
