"""The KV identity of a vLLM pod's plan (launcher/contract/plan.py KvIdentity): the model string, block
size and hash seed its engine really gets, so pods of pools from different recipes can be compared."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.group.conftest import pd_recipe

POD = {"POD_IP": "10.1.2.3", "POD_NAME": "p", "POD_NAMESPACE": "ns"}


def _identity(plan_json: Callable[..., dict[str, Any]], recipe: Path, pool: str, **env: str) -> Any:
    return plan_json(env={**POD, "LLMD_RECIPE_FILE": str(recipe), "LLMD_POOL": pool, **env})["kv_events"][
        "identity"
    ]


def test_prefill_and_decode_of_one_recipe_show_one_identity(
    plan_json: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    recipe = pd_recipe(tmp_path / "r.yaml", tmp_path / "model")
    seed = hashlib.sha256(b"42").hexdigest()[:12]
    expected = {"model": str(tmp_path / "model"), "block_size": 32, "hash_seed": seed}
    assert _identity(plan_json, recipe, "prefill") == _identity(plan_json, recipe, "decode") == expected


def test_a_decode_recipe_with_another_seed_shows_another_identity(
    plan_json: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """The case a recipe cannot refuse: the decode pool comes from another recipe (here, the same shape
    with seed 7 in both its pools, so it loads): its pods export another hash_seed, which the rule over
    both pools catches."""
    ours = pd_recipe(tmp_path / "ours.yaml", tmp_path / "model")
    theirs = tmp_path / "theirs.yaml"
    theirs.write_text(ours.read_text().replace('PYTHONHASHSEED: "42"', 'PYTHONHASHSEED: "7"'))
    prefill = _identity(plan_json, ours, "prefill")
    decode = _identity(plan_json, theirs, "decode")
    assert decode["hash_seed"] == hashlib.sha256(b"7").hexdigest()[:12] != prefill["hash_seed"]


def test_the_block_size_is_the_one_on_the_engines_argv(
    plan_json: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """A pool that exchanges no KV may take --block-size from LLMD_EXTRA_ARGS: the identity follows the
    argv, not the recipe, and a pool without PYTHONHASHSEED says so."""
    recipe = tmp_path / "one.yaml"
    recipe.write_text(
        "name: one\n"
        f"model: {{path: {tmp_path / 'model'}, served_name: tiny}}\n"
        "default_pool: serve\n"
        "pools:\n"
        "  serve:\n"
        "    kind: vllm\n"
        "    port: 8000\n"
        "    args: {block-size: 32}\n"
        "    kv_events: {port: 5557}\n"
    )
    assert _identity(plan_json, recipe, "serve") == {
        "model": str(tmp_path / "model"), "block_size": 32, "hash_seed": "unset"
    }  # fmt: skip
    overridden = _identity(plan_json, recipe, "serve", LLMD_EXTRA_ARGS="--block-size 16")
    assert overridden["block_size"] == 16
