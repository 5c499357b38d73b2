"""`plan --model-config FILE` (issue #41 item 2): what the model's config.json rules out, refused at
plan for every release the launcher ships a catalogue of. Each planned rc 0 before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

QWEN = {"num_attention_heads": 64, "num_key_value_heads": 4, "max_position_embeddings": 40960}
HEAD = "name: x\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p:\n    kind: "


def _plan(run_cli: Any, tmp_path: Path, pool: str, version: str, config: dict[str, Any] = QWEN) -> Any:
    (tmp_path / "recipe.yaml").write_text(HEAD + pool)
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = {"LLMD_RECIPE_FILE": str(tmp_path / "recipe.yaml")}
    return run_cli(
        "plan", "--engine-version", version, "--model-config", str(tmp_path / "config.json"), env=env
    )


CONTEXT = [("vllm", "max-model-len", v) for v in ("0.32.0", "0.33.0")] + [
    ("sglang", "context-length", v) for v in ("0.5.22", "0.5.23")
]


@pytest.mark.parametrize(("engine", "flag", "version"), CONTEXT, ids=[c[2] for c in CONTEXT])
def test_a_context_past_max_position_embeddings_is_refused(
    run_cli: Any, tmp_path: Path, engine: str, flag: str, version: str
) -> None:
    code, _, err = _plan(run_cli, tmp_path, f"{engine}\n    args: {{{flag}: 131072}}\n", version)
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    assert code == 2
    assert (
        f"--{flag} 131072: the model's max_position_embeddings is 40960, and {name} {version} refuses" in err
    )
    scaled = {**QWEN, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}  # the engine derives more
    assert _plan(run_cli, tmp_path, f"{engine}\n    args: {{{flag}: 131072}}\n", version, scaled)[0] == 0


def test_an_unreadable_model_config_is_one_line(run_cli: Any, tmp_path: Path) -> None:
    code, out, err = run_cli("plan", "--model-config", str(tmp_path / "missing.json"))
    assert (code, out) == (2, "")
    assert err.startswith("llm-d-launcher: error: --model-config: cannot read") and err.count("\n") == 1


ENGINES = [("vllm", "vLLM", v) for v in ("0.32.0", "0.33.0")] + [
    ("sglang", "SGLang", v) for v in ("0.5.22", "0.5.23")
]
GQA = {"num_attention_heads": 48, "num_key_value_heads": 8, "max_position_embeddings": 40960}


@pytest.mark.parametrize(("engine", "name", "version"), ENGINES, ids=[e[2] for e in ENGINES])
def test_kv_heads_neither_split_nor_replicated_evenly_are_refused(
    run_cli: Any, tmp_path: Path, engine: str, name: str, version: str
) -> None:
    """TP 6 divides the 48 attention heads but neither divides the 8 KV heads nor is a multiple of
    them; TP 4 splits them, TP 16 replicates each on two ranks."""
    code, _, err = _plan(run_cli, tmp_path, f"{engine}\n    tensor_parallel: 6\n", version, GQA)
    assert code == 2
    assert (
        f"--model-config: tensor_parallel 6: the model has 8 KV heads, and {name} {version} requires "
        "TP to divide them or be a multiple of them (" in err
    )
    assert "QKVParallelLinear" in err
    for tp in (4, 16):
        assert _plan(run_cli, tmp_path, f"{engine}\n    tensor_parallel: {tp}\n", version, GQA)[0] == 0


HEADS_RULES = {
    "vllm": "vllm/config/model.py ModelConfig.verify_with_parallel_config",
    "sglang": "sglang/srt/layers/linear.py QKVParallelLinear",
}


@pytest.mark.parametrize(("engine", "name", "version"), ENGINES, ids=[e[2] for e in ENGINES])
def test_tp_6_for_a_64_head_model_is_refused(
    run_cli: Any, tmp_path: Path, engine: str, name: str, version: str
) -> None:
    code, _, err = _plan(run_cli, tmp_path, f"{engine}\n    tensor_parallel: 6\n", version)
    assert code == 2
    assert (
        f"--model-config: tensor_parallel 6: the model has 64 attention heads, and {name} {version} "
        f"requires them divisible by TP ({HEADS_RULES[engine]})" in err
    )
    assert _plan(run_cli, tmp_path, f"{engine}\n    tensor_parallel: 8\n", version)[0] == 0


MOE = {**QWEN, "num_experts": 60}


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
def test_experts_not_divisible_by_ep_are_refused_on_sglang(
    run_cli: Any, tmp_path: Path, version: str
) -> None:
    pool = "sglang\n    tensor_parallel: 8\n    args: {{ep-size: 8{}}}\n"
    code, _, err = _plan(run_cli, tmp_path, pool.format(""), version, MOE)
    assert code == 2
    assert (
        f"--model-config: --ep-size 8: the model has 60 routed experts (with 0 redundant), and SGLang "
        f"{version} requires them divisible by the EP size (sglang/srt/layers/moe/fused_moe_triton/layer.py"
        in err
    )
    assert _plan(run_cli, tmp_path, pool.format(", ep-num-redundant-experts: 4"), version, MOE)[0] == 0


# The engines' own switches (vLLM 0.32/0.33 vllm/envs.py: stripped, lower-cased, "1" or "true";
# SGLang 0.5.22/0.5.23 srt/environ.py EnvBool: lower-cased "true", "1", "yes", "y") turn the refusal
# into a warning; the plan honours them where they reach the engine: the recipe's env or LLMD_EXTRA_ENV.
SWITCHED = [
    ("vllm", "max-model-len", "0.32.0", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", " True ", "yes"),
    ("vllm", "max-model-len", "0.33.0", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1", "0"),
    ("sglang", "context-length", "0.5.22", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "y", " 1"),
    ("sglang", "context-length", "0.5.23", "SGLANG_IS_IN_CI", "yes", "false"),
]


@pytest.mark.parametrize(
    ("engine", "flag", "version", "switch", "on", "off"), SWITCHED, ids=[s[2] for s in SWITCHED]
)
def test_the_engines_allow_switch_in_the_plans_env_lets_a_longer_context_through(
    run_cli: Any, tmp_path: Path, engine: str, flag: str, version: str, switch: str, on: str, off: str
) -> None:
    pool = f"{engine}\n    args: {{{flag}: 131072}}\n    env: {{{switch}: {json.dumps(on)}}}\n"
    assert _plan(run_cli, tmp_path, pool, version)[0] == 0
    pool = f"{engine}\n    args: {{{flag}: 131072}}\n    env: {{{switch}: {json.dumps(off)}}}\n"
    code, _, err = _plan(run_cli, tmp_path, pool, version)  # a value the engine reads as off
    assert code == 2 and "max_position_embeddings is 40960" in err
    extra = {"LLMD_EXTRA_ENV": json.dumps({switch: on})}
    (tmp_path / "recipe.yaml").write_text(HEAD + f"{engine}\n    args: {{{flag}: 131072}}\n")
    argv = ("plan", "--engine-version", version, "--model-config", str(tmp_path / "config.json"))
    assert run_cli(*argv, env={"LLMD_RECIPE_FILE": str(tmp_path / "recipe.yaml"), **extra})[0] == 0
    # The planning shell's own env is not the container's: it allows nothing.
    assert run_cli(*argv, env={"LLMD_RECIPE_FILE": str(tmp_path / "recipe.yaml"), switch: on})[0] == 2
