"""A recipe file's YAML, parsed within bounds: only a recipe *file* needs PyYAML (the built-in recipes
ship compiled, launcher/config/recipe_file.py), so only reading one imports it.

A recipe file is untrusted input mounted from a ConfigMap: its size is bounded as it is read
(recipe_file.py), its alias expansion and nesting before anything is built, and no error line repeats
the text it points at (it may hold a secret).
"""

from collections.abc import Mapping
from typing import Any

import yaml

from launcher.config.recipe import BooleanWord
from launcher.config.recipe_source import RecipeSource
from launcher.contract.errors import ConfigError

_MAX_NODES = 100_000  # values after alias expansion: a "billion laughs" file is refused, not expanded
_MAX_DEPTH = 64  # nesting; deeper would only exhaust the parser's and the validators' recursion


class _RecipeLoader(yaml.CSafeLoader):  # libyaml: a tenth of the pure-Python parse time
    """Safe YAML that refuses duplicate keys (in a ConfigMap the last one silently winning hides
    typos) and keeps dates as text (2026-01-01 is a string to an engine flag, not a date)."""

    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML's class-level registry
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> bool | str:  # type: ignore[override]
        """YAML 1.1's unquoted yes/no/on/off stay the word written (a BooleanWord), so a message
        can echo it (`nodes: yes` was read as 1): a boolean field still takes it, and an engine
        flag's value is its boolean (launcher/config/recipe.py _check_args)."""
        text = str(node.value)
        return super().construct_yaml_bool(node) if text.lower() in ("true", "false") else BooleanWord(text)

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


_RecipeLoader.add_constructor("tag:yaml.org,2002:bool", _RecipeLoader.construct_yaml_bool)


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


def _tab_indented(text: str, line: int) -> bool:
    """Whether the line YAML stopped at starts with a tab among its indentation: libyaml says only
    "found character that cannot start any token" (YAML 1.2 section 6.1: tabs never indent)."""
    lines = text.splitlines()
    if not 0 <= line < len(lines):
        return False
    row = lines[line]
    return "\t" in row[: len(row) - len(row.lstrip(" \t"))]


def parse_recipe_yaml(text: str, source: RecipeSource) -> Mapping[str, Any]:
    """The YAML's data, or one line saying where it is broken: never the offending line itself,
    which may hold a secret (an env value, a JSON config with credentials)."""
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
        if mark is not None and _tab_indented(text, mark.line):
            raise ConfigError.one(
                source.setting,
                f"{source.label} indents line {mark.line + 1} with a tab, which YAML does not allow",
                "indent with spaces",
            ) from None
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
