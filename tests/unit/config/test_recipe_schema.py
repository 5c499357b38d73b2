"""The recipe schema is declared once, by the models in launcher/config/recipe.py and their field
descriptions: `recipes schema` ships it as JSON Schema for editors, `recipes show` prints a built-in
recipe to start from, and a wrong key names the key meant and points at the schema command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from launcher.config import recipe as recipe_models
from launcher.config.recipe import json_schema
from launcher.config.recipe_file import builtin_recipe_names, builtin_recipe_text
from tests.unit.user_recipe import USER_RECIPE

MODELS = [
    cls
    for cls in vars(recipe_models).values()
    if isinstance(cls, type) and issubclass(cls, recipe_models._Data) and not cls.__name__.startswith("_")
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_recipe_key_has_a_description(model: type[recipe_models._Data]) -> None:
    """The generated reference (docs/reference/recipe-schema.md) and editors' hover text come from these."""
    assert [name for name, info in model.model_fields.items() if not info.description] == []


@pytest.mark.parametrize("name", builtin_recipe_names())
def test_schema_accepts_every_built_in_recipe(name: str) -> None:
    """What an editor checks must accept what the launcher accepts (sizes as "96GiB" as well as bytes)."""
    data = yaml.safe_load(builtin_recipe_text(name))
    errors = [e.message for e in jsonschema.Draft202012Validator(json_schema()).iter_errors(data)]
    assert errors == []


def test_schema_refuses_what_the_launcher_refuses() -> None:
    data = yaml.safe_load(USER_RECIPE)
    data["pools"]["serve"]["memory"] = {"overhead": "1Gi"}  # the README once documented this key
    validator = jsonschema.Draft202012Validator(json_schema())
    assert not validator.is_valid(data)


def test_schema_command_prints_the_shipped_schema(run_cli: Any) -> None:
    code, out, _ = run_cli("recipes", "schema")
    shipped = Path(__file__).resolve().parents[3] / "docs" / "reference" / "recipe.schema.json"
    assert code == 0 and json.loads(out) == json_schema() == json.loads(shipped.read_text())


@pytest.mark.parametrize("name", builtin_recipe_names())
def test_show_prints_a_built_in_recipe_to_copy(run_cli: Any, tmp_path: Path, name: str) -> None:
    code, out, _ = run_cli("recipes", "show", name)
    assert code == 0 and out == builtin_recipe_text(name)
    copy = tmp_path / "copy.yaml"
    copy.write_text(out)
    code, plan_out, err = run_cli("plan", "--format", "json", env={"LLMD_RECIPE_FILE": str(copy)})
    assert code == 0, err
    assert json.loads(plan_out)["recipe"] == name


def test_show_of_an_unknown_recipe_names_the_built_in_ones(run_cli: Any) -> None:
    code, out, err = run_cli("recipes", "show", "kimi")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "use one of kimi-k3.1-pro, optimized-baseline-cpu-vllm, " in err


def _plan_error(run_cli: Any, tmp_path: Path, text: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(path)})
    assert code == 2
    return str(err)


def test_a_misspelt_key_gets_a_did_you_mean(run_cli: Any, tmp_path: Path) -> None:
    err = _plan_error(run_cli, tmp_path, USER_RECIPE.replace("    port: 9000", "    prot: 9000"))
    assert err.splitlines() == [
        f"llm-d-launcher: error: LLMD_RECIPE_FILE: {tmp_path}/recipe.yaml: pools.serve.prot: unknown key "
        "(did you mean port?); correct the recipe (its keys and types: `llm-d-launcher recipes schema`)"
    ]


def test_an_unknown_key_lists_the_valid_ones_and_echoes_no_value(run_cli: Any, tmp_path: Path) -> None:
    text = USER_RECIPE.replace("    kv_events:", "    memory: {overhead: hf_SECRETVALUE}\n    kv_events:")
    text = text.replace("model: {path: /models/tiny", "model: {path: /models/tiny, revison: hf_SECRETVALUE")
    err = _plan_error(run_cli, tmp_path, text)
    assert "hf_SECRETVALUE" not in err
    lines = err.splitlines()
    assert len(lines) == 2
    assert "model.revison: unknown key (valid keys: path, served_name);" in lines[0]
    assert (
        "pools.serve.memory: unknown key (valid keys: api_servers, args, capabilities, data_parallel_local,"
        in lines[1]
    )
    assert all(line.endswith("(its keys and types: `llm-d-launcher recipes schema`)") for line in lines)


def test_the_schema_branches_on_kind_in_standard_json_schema() -> None:
    """Issue #34: pydantic's `discriminator` is OpenAPI, not JSON Schema; an editor's validator tried
    every pool schema and gave `kind: vLLM` an error about other keys. With if/then it names kind."""
    assert "discriminator" not in json.dumps(json_schema())
    data = yaml.safe_load(USER_RECIPE)
    data["pools"]["serve"]["kind"] = "vLLM"
    validator = jsonschema.Draft202012Validator(json_schema())
    best = jsonschema.exceptions.best_match(validator.iter_errors(data))
    assert best is not None and list(best.path) == ["pools", "serve", "kind"], best
    assert best.message.startswith("'vLLM' is not one of ['vllm', 'sglang', "), best.message


def test_a_key_of_another_kind_is_named_by_the_right_branch() -> None:
    data = yaml.safe_load(USER_RECIPE)
    pool = data["pools"]["serve"]
    assert pool["kind"] == "vllm"
    pool["no_such_key"] = 1
    validator = jsonschema.Draft202012Validator(json_schema())
    best = jsonschema.exceptions.best_match(validator.iter_errors(data))
    assert best is not None and "'no_such_key' was unexpected" in best.message, best.message
