"""`run` with a mounted checkpoint (issue #41 item 2): the model's config.json is checked as `plan
--model-config` checks it, before preflight and before anything is spawned, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _run(run_cli: Any, tmp_path: Path, tp: int) -> tuple[int, str, str]:
    checkpoint = tmp_path / "qwen3"
    checkpoint.mkdir(exist_ok=True)
    (checkpoint / "config.json").write_text(json.dumps({"num_attention_heads": 64, "num_key_value_heads": 4}))
    (checkpoint / "tokenizer.json").write_text("{}")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"name: x\nmodel: {{path: {checkpoint}}}\ndefault_pool: p\n"
        f"pools:\n  p:\n    kind: vllm\n    tensor_parallel: {tp}\n"
    )
    (tmp_path / "bin").mkdir(exist_ok=True)  # no engine binary: preflight would refuse it next
    env = {
        "LLMD_RECIPE_FILE": str(recipe),
        "LLMD_BIN_PATH": str(tmp_path / "bin"),
        "PATH": str(tmp_path / "bin"),
        "LLMD_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }
    code, out, err = run_cli("run", env=env)
    return code, out, err


def test_run_refuses_tp_the_mounted_checkpoint_cannot_shard(run_cli: Any, tmp_path: Path) -> None:
    code, _, err = _run(run_cli, tmp_path, 6)
    assert code == 2, err[-2000:]
    assert "model.path: tensor_parallel 6: the model has 64 attention heads, and vLLM" in err
    assert "not found or not executable" not in err  # refused before preflight looks for binaries
    code, _, err = _run(run_cli, tmp_path, 8)  # the same pod with a TP the model allows gets further
    assert "attention heads" not in err and "not found or not executable" in err, err[-2000:]
