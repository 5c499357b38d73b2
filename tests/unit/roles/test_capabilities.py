"""Every built-in recipe's derived capabilities (roles/capabilities.py), golden-tested against
tests/fixtures/derived-capabilities.json (review a change there like a plan change); the Kimi guide's
router paragraph as capability checks; the recipe's own list over the defaults; llm-d's proposal's
`requirements.modelServer.capabilities` shape read and written back."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.recipe import Recipe
from launcher.config.recipe_file import RecipeSource, builtin_recipe_names, load_recipe
from launcher.contract.capabilities import Level, from_requirements, to_requirements
from roles.capabilities import pool_capabilities
from tests.unit.roles.test_golden_kimi import DECODE_LEADER, PREFILL_LEADER, TPU_LEADER, lws

GOLDEN = Path(__file__).parents[2] / "fixtures" / "derived-capabilities.json"


@pytest.mark.parametrize("name", builtin_recipe_names())
def test_every_built_in_recipes_derived_capabilities_are_the_golden_ones(name: str) -> None:
    recipe = load_recipe(RecipeSource(name, None))
    derived = {
        pool: {c: f"{level.value}: {by}" for c, (level, by) in pool_capabilities(recipe, pool).items()}
        for pool in recipe.pools
    }
    assert derived == json.loads(GOLDEN.read_text())[name]


def _checks(plan_json: Any, env: dict[str, str]) -> list[tuple[str, str, str]]:
    plan = plan_json(env=env)
    return [(c["capability"], c["level"], c["target"]) for c in plan["capabilities"]["checks"]]


def test_kimi_pools_promise_what_the_guides_router_paragraph_says(plan_json: Any) -> None:
    """Render on :8089 for prefill; the scorers' metrics on every decode rank port 8000..8003; the TPU
    pool's KV pool holding one 491,520-token request."""
    prefill = _checks(plan_json, lws(PREFILL_LEADER, 2, 0, "10.64.1.10", "prefill"))
    assert ("api.render.completions", "required", "render :8089") in prefill
    assert ("api.render.chat-completions", "required", "render :8089") in prefill
    decode = _checks(plan_json, lws(DECODE_LEADER, 4, 2, "10.64.2.2", "decode"))
    for metric in ("metric.queue-depth", "metric.kv-cache-utilization"):
        assert [t for c, level, t in decode if c == metric and level == "required"] == [
            f"rank {8 + i} :{8000 + i}" for i in range(4)
        ]
    tpu = plan_json(env={**lws(TPU_LEADER, 4, 0, "10.64.3.0", "tpu"), "TPU_WORKER_ID": "0"})
    (fit,) = [c for c in tpu["capabilities"]["checks"] if c["capability"] == "kv-cache.context-fit"]
    assert fit["probe"]["context"] == 491520 and fit["level"] == "required"


def test_a_headless_worker_checks_no_capability(plan_json: Any) -> None:
    env = {**lws(PREFILL_LEADER, 2, 1, "10.64.1.11", "prefill"), "LWS_LEADER_ADDRESS": "10.64.1.10"}
    plan = plan_json(env=env)
    assert plan["capabilities"] is None
    assert all(c["name"] != "capabilities" for c in plan["probes"]["ready"])


def _recipe(capabilities: str) -> Recipe:
    text = (
        "name: r\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
        f"    kv_events: {{port: 5557}}\n    capabilities: {capabilities}\n"
    )
    return Recipe.model_validate(yaml.safe_load(text))


def test_the_recipes_list_adds_lowers_and_turns_off_derived_ones() -> None:
    recipe = _recipe(
        "[api.render.messages, {name: metric.queue-depth, level: expected}, "
        "{name: kv-events.publisher-reachable, level: off}]"
    )
    levels = {c: level for c, (level, _) in pool_capabilities(recipe, "p").items()}
    assert levels == {
        "api.render.messages": Level.REQUIRED,
        "metric.queue-depth": Level.EXPECTED,
        "metric.kv-cache-utilization": Level.REQUIRED,
    }


def test_an_unknown_capability_is_refused_naming_the_vocabulary() -> None:
    said = re.escape("'api.render' is not a capability: one of api.render.completions")
    with pytest.raises(ValueError, match=said):
        _recipe("[api.render]")


def test_the_proposals_shape_round_trips() -> None:
    """llm-d/llm-d proposals/model-server-capability-contract.md @0172f04d: a list of names under
    requirements.modelServer.capabilities (all required); an expected one as {name, level}."""
    proposal = yaml.safe_load(
        "requirements:\n  modelServer:\n    capabilities:\n"
        "      - api.render.chat-completions\n      - metric.queue-depth\n"
        "      - {name: metric.kv-cache-utilization, level: expected}\n"
    )
    levels = from_requirements(proposal)
    assert levels == {
        "api.render.chat-completions": Level.REQUIRED,
        "metric.queue-depth": Level.REQUIRED,
        "metric.kv-cache-utilization": Level.EXPECTED,
    }
    assert to_requirements(levels) == proposal
    assert from_requirements(to_requirements(levels)) == levels


@pytest.mark.parametrize(
    "document",
    [{}, {"requirements": {"modelServer": {"capabilities": ["nope"]}}},
     {"requirements": {"modelServer": {"capabilities": [{"name": "metric.queue-depth", "level": "maybe"}]}}}],
)  # fmt: skip
def test_a_malformed_requirements_block_is_refused(document: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        from_requirements(document)


def test_recipes_show_exports_the_proposals_shape_and_a_pool_imports_it(run_cli: Any) -> None:
    code, out, _ = run_cli("recipes", "show", "kimi-k3.1-pro", "--capabilities")
    assert code == 0
    exported = yaml.safe_load(out)
    kimi = load_recipe(RecipeSource("kimi-k3.1-pro", None))
    assert set(exported) == set(kimi.pools)
    decode = exported["decode"]["requirements"]["modelServer"]["capabilities"]
    assert {"name": "kv-transfer.peer-side-channel-reachable", "level": "expected"} in decode
    # Imported into a pool's capabilities: the same levels as derived.
    text = (
        "name: r\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
        f"    capabilities: {json.dumps(exported['prefill'])}\n"
    )
    imported = Recipe.model_validate(yaml.safe_load(text)).pools["p"]
    levels = {c.name: c.level for c in imported.capabilities}  # type: ignore[union-attr]
    derived = pool_capabilities(kimi, "prefill")
    assert levels == {c: level.value for c, (level, _) in derived.items()}
