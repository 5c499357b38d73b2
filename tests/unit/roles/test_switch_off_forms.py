"""A recipe `false` for a switch is written the way the pod's engine accepts it, decided from the
catalogue in use (roles/flags.py off_switch): vLLM 0.32's --no-X, vLLM 0.33's other half of an
--enable-X/--disable-X pair (both catalogues built from the engines' own parsers)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.config.recipe_file import RecipeSource, load_recipe, validate_recipe
from launcher.config.settings import Settings
from launcher.contract.errors import ConfigError
from roles import FoundInPod, build_plan
from roles.flags import load_catalog, off_switch

V032 = load_catalog("vllm-serve", "0.32.0")
V033 = load_catalog("vllm-serve", "0.33.0")
SGLANG = load_catalog("sglang-server", "0.5.23")
KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))


def _single_pod(args: dict[str, Any]) -> Any:
    data = {
        "name": "switches",
        "model": {"path": "/models/m", "served_name": "m"},
        "default_pool": "serve",
        "pools": {"serve": {"kind": "vllm", "port": 8000, "args": args}},
    }
    return validate_recipe(data, RecipeSource("switches", None))


def _argv(recipe: Any, version: str, pool: str = "serve", **settings: Any) -> tuple[str, ...]:
    found = FoundInPod(engine_version=version)
    return build_plan(Settings(pool=pool, **settings), recipe, found=found).engine.argv


def test_the_kimi_decode_pools_false_follows_the_engine_version() -> None:
    """decode: enable-prefix-caching: false (the guide's decode runs without prefix caching)."""
    old = _argv(KIMI, "0.32.0+cpu", "decode", leader_address="kimi-decode-0.kimi")
    new = _argv(KIMI, "0.33.0", "decode", leader_address="kimi-decode-0.kimi")
    assert "--no-enable-prefix-caching" in old and "--disable-prefix-caching" not in old
    assert "--disable-prefix-caching" in new and "--no-enable-prefix-caching" not in new


def test_both_directions_of_the_033_pairs() -> None:
    recipe = _single_pod({"enable-prefix-caching": False, "disable-hybrid-kv-cache-manager": False})
    old, new = _argv(recipe, "0.32.0"), _argv(recipe, "0.33.0")
    assert {"--no-enable-prefix-caching", "--no-disable-hybrid-kv-cache-manager"} <= set(old)
    assert {"--disable-prefix-caching", "--enable-hybrid-kv-cache-manager"} <= set(new)
    assert not any(token.startswith("--no-") for token in new)


def test_every_no_form_033_hid_has_its_pair_in_the_033_catalogue() -> None:
    """The 50 real renames: each switch 0.32 turned off with --no-X is turned off on 0.33 by a flag the
    0.33 catalogue has, the pair's other half; 0.32 keeps --no-X; a 0.33 BooleanOptionalAction outside
    the pairs (--monokernel) keeps --no-X too."""
    hidden = sorted(f for f in V032.flags if f.startswith("--no-") and f not in V033.flags)
    assert len(hidden) == 50
    for no_flag in hidden:
        switch = no_flag.removeprefix("--no-")
        assert off_switch(V032, switch) == f"no-{switch}"
        prefix, rest = switch.split("-", 1)
        other = {"enable": "disable", "disable": "enable"}[prefix]
        assert off_switch(V033, switch) == f"{other}-{rest}" and f"--{other}-{rest}" in V033.flags
    assert off_switch(V033, "monokernel") == "no-monokernel" and "--no-monokernel" in V033.flags
    assert off_switch(V033, "enable_prefix_caching") == "disable-prefix-caching"  # vLLM reads _ too


def test_an_engine_without_off_forms_still_gets_no_x_and_the_fix() -> None:
    """SGLang 0.5.23 writes most switches store_true: a recipe `false` renders --no-X, refused."""
    assert off_switch(SGLANG, "enable-metrics") == "no-enable-metrics"
    tpu = json.loads(json.dumps(KIMI.model_dump(mode="json", by_alias=True)))
    tpu["pools"]["tpu"]["args"]["enable-hierarchical-cache"] = False
    recipe = validate_recipe(tpu, RecipeSource("tpu-false", None))
    with pytest.raises(ConfigError, match="--enable-hierarchical-cache has no --no- form in sglang"):
        build_plan(Settings(pool="tpu", leader_address="tpu-0.tpu"), recipe)


def test_a_hidden_033_no_form_is_refused_with_the_form_033_writes() -> None:
    from roles.args import split_extra_args
    from roles.flags import check_flags

    [problem] = check_flags(V033, split_extra_args("--no-enable-prefix-caching", "X"), "X")
    assert "turns --enable-prefix-caching off with --disable-prefix-caching" in problem.message
    assert problem.fix.startswith("write --disable-prefix-caching")


def test_extra_args_replace_either_half_of_a_pair() -> None:
    """LLMD_EXTRA_ARGS --disable-prefix-caching replaces the recipe's enable-prefix-caching: true on
    0.33 (one merge identity for the pair), as --no-enable-prefix-caching does on 0.32."""
    recipe = _single_pod({"enable-prefix-caching": True})
    found = FoundInPod(engine_version="0.33.0")
    plan = build_plan(Settings(pool="serve", extra_args="--disable-prefix-caching"), recipe, found=found)
    assert "--enable-prefix-caching" not in plan.engine.argv
    assert plan.engine.argv.count("--disable-prefix-caching") == 1
    assert any("--disable-prefix-caching replaces --enable-prefix-caching" in n for n in plan.notes)
