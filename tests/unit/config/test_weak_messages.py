"""The weak messages of issue #41 item 5: the built-in default planned for a pod that named only its
pool, a tab at a key line, a value echoed as written (`yes`, not 1), "did you mean" for list values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

HEAD = "name: x\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p:\n"


def _file(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return {"LLMD_RECIPE_FILE": str(path)}


def test_a_pool_without_a_recipe_says_which_recipe_it_plans(run_cli: Any, plan_json: Any) -> None:
    """Said first in the plan (text: a `# note:`; JSON: notes and stderr) and logged by `run`."""
    note = (
        "LLMD_POOL is 'decode' but neither LLMD_RECIPE nor LLMD_RECIPE_FILE is set: planning pool "
        "'decode' of the built-in default recipe kimi-k3.1-pro; set LLMD_RECIPE_FILE to the pod's recipe "
        "(or LLMD_RECIPE to the built-in one meant)"
    )
    code, out, _ = run_cli("plan", env={"LLMD_POOL": "decode"})
    assert code == 0 and f"# note: {note}\n" in out
    assert note in plan_json(env={"LLMD_POOL": "decode"})["notes"]
    for env in ({"LLMD_RECIPE": "kimi-k3.1-pro", "LLMD_POOL": "decode"}, {}):
        assert not any("LLMD_POOL is" in n for n in plan_json(env=env)["notes"])


@pytest.mark.parametrize("text", [HEAD + "\tkind: vllm\n", HEAD.replace("  p:", "\tp:") + "    kind: vllm\n"])
def test_a_tab_at_a_key_line_is_named(run_cli: Any, tmp_path: Path, text: str) -> None:
    """Was: "is not valid YAML (while scanning for the next token found character that cannot start any
    token at line 6, column 1)"."""
    code, _, err = run_cli("plan", env=_file(tmp_path, text))
    line = text.count("\n", 0, text.index("\t")) + 1
    assert code == 2
    assert f"indents line {line} with a tab, which YAML does not allow; indent with spaces" in err


@pytest.mark.parametrize(
    ("field", "written"),
    [("nodes", "yes"), ("gpus_per_node", "on"), ("port", "off"), ("tensor_parallel", '"yes"')],
)
def test_a_number_field_echoes_what_was_written(
    run_cli: Any, tmp_path: Path, field: str, written: str
) -> None:
    """`nodes: yes` planned a 1-pod group, `port: off` port 0's error said nothing of `off`."""
    code, _, err = run_cli("plan", env=_file(tmp_path, HEAD + f"    kind: vllm\n    {field}: {written}\n"))
    assert code == 2
    assert f"pools.p.{field}: Input should be a valid integer" in err
    assert f"(got {written.strip(chr(34))!r})" in err


def test_yes_still_means_true_where_a_boolean_is_meant(plan_json: Any, tmp_path: Path) -> None:
    text = (
        HEAD
        + "    kind: vllm\n    kv_events: {readiness: yes}\n"
        + "    args: {enforce-eager: yes}\n    env: {A: on}\n"
    )
    plan = plan_json(env=_file(tmp_path, text))
    engine = plan["processes"][0]
    assert "--enforce-eager" in engine["argv"] and engine["env"]["A"] == "on"


def test_a_recipe_list_value_gets_did_you_mean(run_cli: Any, tmp_path: Path) -> None:
    code, _, err = run_cli(
        "plan", env=_file(tmp_path, HEAD + "    kind: vllm\n    host: {advisory: [netwrok]}\n")
    )
    assert code == 2
    assert "pools.p.host.advisory.0: Input should be 'network'" in err
    assert "(got 'netwrok'; did you mean 'network'?)" in err


def test_a_list_flag_s_items_are_checked_against_its_choices(run_cli: Any, tmp_path: Path) -> None:
    """Was planned rc 0: list flags' items were never checked."""
    text = HEAD + "    kind: sglang\n    args: {lora-target-modules: [q_proj, k_prj]}\n"
    code, _, err = run_cli("plan", env=_file(tmp_path, text))
    assert code == 2
    assert (
        "--lora-target-modules 'k_prj' is not one of sglang.launch_server 0.5.23's choices "
        "(did you mean k_proj?)" in err
    )
