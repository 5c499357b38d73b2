"""Reading a recipe: the file or built-in YAML, parsed within bounds, then validated by the schema.

A recipe file is untrusted input mounted from a ConfigMap: its size, alias expansion and nesting are
bounded before anything is built, and no error line repeats the text it points at (it may hold a secret).
"""

import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from launcher.config.recipe import POOL_KINDS, Recipe, json_schema
from launcher.contract.errors import ConfigError, Problem

SCHEMA_FIX = "correct the recipe (its keys and types: `llm-d-launcher recipes schema`)"
MAX_RECIPE_BYTES = 1 << 20  # a recipe is a page of YAML; a ConfigMap holds at most 1 MiB
_MAX_NODES = 100_000  # values after alias expansion: a "billion laughs" file is refused, not expanded
_MAX_DEPTH = 64  # nesting; deeper would only exhaust the parser's and the validators' recursion


class _RecipeLoader(yaml.CSafeLoader):  # libyaml: a tenth of the pure-Python parse time
    """Safe YAML that refuses duplicate keys (in a ConfigMap the last one silently winning hides
    typos) and keeps dates as text (2026-01-01 is a string to an engine flag, not a date)."""

    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML's class-level registry
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (list, dict)):  # `? [a]`: no recipe key is a list or a mapping
                raise yaml.constructor.ConstructorError(
                    None, None, "a key that is a list or a mapping", key_node.start_mark
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {str(key)[:64]!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _Refused(Exception):
    """The YAML is well-formed but too big to expand: aliases, nesting or NUL bytes."""


def _check_nodes(root: yaml.Node) -> None:
    """Bound the document before it is built: its size as if every alias were expanded (each distinct
    node is sized once, so a bomb costs its written size), its depth, and NUL bytes, which no argv or
    env value can carry."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > _MAX_DEPTH:
            raise _Refused(f"nests too deeply (over {_MAX_DEPTH} levels)")
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif "\0" in node.value:
            raise _Refused(f"holds a NUL byte (line {node.start_mark.line + 1})")
        if id(node) in sizes:
            continue
        if not done:
            stack.append((node, depth, True))
            stack += [(child, depth + 1, False) for child in children if id(child) not in sizes]
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
        if sizes[id(node)] > _MAX_NODES:
            raise _Refused(f"expands to more than {_MAX_NODES} values (YAML aliases)")


@dataclass(frozen=True)
class RecipeSource:
    """Where a recipe comes from, and the setting a person changes to fix it."""

    name: str
    file: str | None

    @property
    def setting(self) -> str:
        return "LLMD_RECIPE" if self.file is None else "LLMD_RECIPE_FILE"

    @property
    def label(self) -> str:
        """For messages: a path with a newline in it would break the one-line-per-problem rule."""
        if self.file is None:
            return (
                f"built-in recipe {self.name!r}"
                if not self.name.isprintable()
                else f"built-in recipe {self.name}"
            )
        return self.file if self.file.isprintable() and self.file else repr(self.file)


def builtin_recipe_names() -> list[str]:
    files = resources.files("launcher.config").joinpath("recipes").iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


def _parse_yaml(text: str, source: RecipeSource) -> Mapping[str, Any]:
    """The YAML's data, or one line saying where it is broken: never the offending line itself,
    which may hold a secret (an env value, a JSON config with credentials)."""
    if len(text) > MAX_RECIPE_BYTES:
        raise ConfigError.one(
            source.setting, f"{source.label} is too large (over {MAX_RECIPE_BYTES} bytes)", "trim the recipe"
        )
    loader = None
    try:
        loader = _RecipeLoader(text)
        root = loader.get_single_node()
        if root is not None:
            _check_nodes(root)
        data = None if root is None else loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):  # libyaml's own bound (1000 levels)
            raise ConfigError.one(
                source.setting, f"{source.label} nests too deeply", "simplify the YAML"
            ) from None
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(x for x in (exc.context, exc.problem) if x)
        raise ConfigError.one(
            source.setting, f"{source.label} is not valid YAML ({what}{where})", "fix the YAML"
        ) from None
    except yaml.reader.ReaderError as exc:  # names the character, never the text around it
        what = f"character #x{exc.character:04x} at position {exc.position}"
        raise ConfigError.one(
            source.setting, f"{source.label} has an unacceptable {what}", "fix the YAML"
        ) from None
    except RecursionError:  # the composer recurses per level, before _check_nodes can count them
        raise ConfigError.one(
            source.setting, f"{source.label} nests too deeply", "simplify the YAML"
        ) from None
    except _Refused as exc:
        raise ConfigError.one(source.setting, f"{source.label} {exc}", "simplify the YAML") from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError.one(
            source.setting, f"{source.label} must hold a YAML mapping", "start it with `name: ...`"
        )
    section = data.get("launcher")
    if isinstance(section, dict) and not all(isinstance(k, str) for k in section):
        raise ConfigError.one(
            source.setting,
            f"{source.label}: `launcher:` has a key that is not a setting name",
            "fix the recipe",
        )
    return data


@functools.lru_cache(maxsize=8)
def read_recipe(source: RecipeSource) -> Mapping[str, Any]:
    """The raw mapping of a recipe. Cached: the settings (its `launcher:` section) and the recipe
    itself are both read from it, and a mounted file is read once per process."""
    if source.file is not None:
        try:
            text = Path(source.file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError.one(
                source.setting,
                f"cannot read {source.label} ({exc.strerror})",
                "mount the recipe file or fix the path",
            ) from None
        except UnicodeDecodeError:
            raise ConfigError.one(
                source.setting, f"{source.label} is not UTF-8 text", "save it as UTF-8"
            ) from None
        return _parse_yaml(text, source)
    return _parse_yaml(builtin_recipe_text(source.name), source)


def builtin_recipe_text(name: str) -> str:
    """A built-in recipe's YAML as shipped (`recipes show NAME` prints it to copy)."""
    names = builtin_recipe_names()
    if name not in names:
        raise ConfigError.one(
            "LLMD_RECIPE",
            f"unknown recipe {name!r}",
            f"use one of {', '.join(names)} or set LLMD_RECIPE_FILE",
        )
    return (resources.files("launcher.config") / "recipes" / f"{name}.yaml").read_text(encoding="utf-8")


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
        elif "discriminator" in node:  # a pool: pydantic's location names its kind
            node = {"$ref": node["discriminator"]["mapping"].get(part, "#/$defs/-")}
            if node["$ref"] == "#/$defs/-":
                return []
        elif isinstance(node.get("additionalProperties"), dict):  # a mapping's own key (a pool's name)
            node = node["additionalProperties"]
        else:
            return []
    return sorted(resolve(node).get("properties", {}))


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """Names the key that was probably meant, or the keys allowed there; never a value."""
    valid = _keys_at(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
    if close:
        return f"unknown key (did you mean {close[0]}?)"
    return f"unknown key (valid keys: {', '.join(valid)})" if valid else "unknown key"


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
                msg = err["msg"].removeprefix("Value error, ")
            problems.setdefault(where, Problem(source.setting, f"{source.label}: {where}: {msg}", SCHEMA_FIX))
        raise ConfigError(list(problems.values())) from None


def load_recipe(source: RecipeSource, name_given: bool = False) -> Recipe:
    """The recipe a pod runs: the user file when given, else the built-in recipe by name."""
    recipe = validate_recipe(read_recipe(source), source)
    if source.file is not None and name_given and recipe.name != source.name:
        raise ConfigError.one(
            "LLMD_RECIPE",
            f"is {source.name!r} but LLMD_RECIPE_FILE holds recipe {recipe.name!r}",
            "unset one of them",
        )
    return recipe
