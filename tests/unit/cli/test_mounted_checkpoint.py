"""`run` with a mounted checkpoint (issue #41 item 2): the model's config.json is checked as `plan
--model-config` checks it, before preflight and before anything is spawned, exit 2; honouring the
engine's allow switches in the container's env, which the engine inherits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MISSING_BINARY = "not found or not executable"  # preflight's refusal: the check let the pod through


def _run(run_cli: Any, tmp_path: Path, pool: str, **env: str) -> tuple[int, str]:
    checkpoint = tmp_path / "model"
    checkpoint.mkdir(exist_ok=True)
    config = {"num_attention_heads": 64, "num_key_value_heads": 4, "max_position_embeddings": 512}
    (checkpoint / "config.json").write_text(json.dumps(config))
    (checkpoint / "tokenizer.json").write_text("{}")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"name: x\nmodel: {{path: {checkpoint}}}\ndefault_pool: p\npools:\n  p:\n{pool}")
    (tmp_path / "bin").mkdir(exist_ok=True)  # no engine binary: preflight would refuse it next
    base = {
        "LLMD_RECIPE_FILE": str(recipe),
        "LLMD_BIN_PATH": str(tmp_path / "bin"),
        "PATH": str(tmp_path / "bin"),
        "LLMD_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }
    code, _, err = run_cli("run", env={**base, **env})
    return code, err


def test_run_refuses_tp_the_mounted_checkpoint_cannot_shard(run_cli: Any, tmp_path: Path) -> None:
    code, err = _run(run_cli, tmp_path, "    kind: vllm\n    tensor_parallel: 6\n")
    assert code == 2, err[-2000:]
    assert "model.path: tensor_parallel 6: the model has 64 attention heads, and vLLM" in err
    assert MISSING_BINARY not in err  # refused before preflight looks for binaries
    _, err = _run(run_cli, tmp_path, "    kind: vllm\n    tensor_parallel: 8\n")  # a TP the model allows
    assert "attention heads" not in err and MISSING_BINARY in err, err[-2000:]


def test_run_honours_the_engines_long_context_switch_in_the_container_env(
    run_cli: Any, tmp_path: Path
) -> None:
    """The CPU guide's pod: --max-model-len 8192 on a 512-position model, VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    in the container's env (vLLM warns and serves); without it (or "0") vLLM refuses, and so does run."""
    vllm = "    kind: vllm\n    args: {max-model-len: 8192}\n"
    code, err = _run(run_cli, tmp_path, vllm)
    assert code == 2 and "model.path: --max-model-len 8192: the model's max_position_embeddings is 512" in err
    assert MISSING_BINARY not in err
    assert "max_position_embeddings" in _run(run_cli, tmp_path, vllm, VLLM_ALLOW_LONG_MAX_MODEL_LEN="0")[1]
    _, err = _run(run_cli, tmp_path, vllm, VLLM_ALLOW_LONG_MAX_MODEL_LEN="1")
    assert "max_position_embeddings" not in err and MISSING_BINARY in err, err[-2000:]
    sglang = "    kind: sglang\n    args: {context-length: 8192}\n"
    assert "max_position_embeddings is 512" in _run(run_cli, tmp_path, sglang)[1]
    _, err = _run(run_cli, tmp_path, sglang, SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN="yes")
    assert "max_position_embeddings" not in err and MISSING_BINARY in err, err[-2000:]
