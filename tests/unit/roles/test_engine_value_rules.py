"""The engine's own value rules in the flag catalogue (issue #41 item 2): what vLLM's pydantic config
classes validate beyond argparse, recorded by `catalog build` with its source, refused at `plan`
for 0.32.0 and 0.33.0 alike. Each of these planned rc 0 before and failed on the GPU node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

HEAD = "name: x\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
SOURCES = {"0.32.0": {"cache": 102, "scheduler": 48}, "0.33.0": {"cache": 215, "scheduler": 48}}
MISTAKES = [
    ("gpu-memory-utilization: 95", "--gpu-memory-utilization 95: vllm serve {v} requires "
     "gpu_memory_utilization <= 1 (vllm/config/cache.py:{cache})"),
    ("max-num-batched-tokens: -1", "--max-num-batched-tokens -1: vllm serve {v} requires "
     "max_num_batched_tokens >= 1 (vllm/config/scheduler.py:{scheduler})"),
    ("kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_produce}",
     "--kv-transfer-config kv_role 'kv_produce' (did you mean kv_producer?): vllm serve {v} requires kv_role "
     "one of kv_both, kv_consumer, kv_producer (vllm/config/kv_transfer.py:71)"),
]  # fmt: skip


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
@pytest.mark.parametrize(("arg", "message"), MISTAKES, ids=["gpu-memory", "batched-tokens", "kv-role"])
def test_a_value_the_engine_refuses_is_refused_at_plan(
    run_cli: Any, tmp_path: Path, version: str, arg: str, message: str
) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(HEAD + f"    args: {{{arg}}}\n")
    code, out, err = run_cli("plan", "--engine-version", version, env={"LLMD_RECIPE_FILE": str(recipe)})
    assert (code, out) == (2, "")
    assert message.format(v=version, **SOURCES[version]) in err


@pytest.mark.parametrize(
    "arg", ["gpu-memory-utilization: 1", "max-num-batched-tokens: 8k", "max-model-len: -1"]
)
def test_values_inside_the_rules_pass(plan_json: Any, tmp_path: Path, arg: str) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(HEAD + f"    args: {{{arg}}}\n")
    plan_json(env={"LLMD_RECIPE_FILE": str(recipe)})
