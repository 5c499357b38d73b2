"""What the model's own config.json rules out, checked at `plan --model-config FILE`: the engine reads
it only after the image pull and scheduling on a GPU node. Pure: the file's mapping comes in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from launcher.contract.errors import Problem

# (engine, rule) -> where the engine enforces it, by release family (function names: stable across
# the releases the launcher ships catalogues for).
HEADS_RULE = "vllm/config/model.py ModelConfig.verify_with_parallel_config"
CONTEXT_RULES = {
    "vllm": ("--max-model-len", "vllm/config/model.py _get_and_verify_max_len"),
    "sglang": ("--context-length", "sglang/srt/configs/model_config.py ModelConfig._derive_context_length"),
}


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal checkpoint keeps the language model's numbers under text_config."""
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


def model_config_problems(
    config: Mapping[str, Any], engine: str, release: str, argv: Sequence[str], tp: int, setting: str
) -> list[Problem]:
    """Attention heads vs TP (vLLM refuses heads not divisible by TP) and the context asked for vs
    max_position_embeddings (both engines refuse it unless told to allow it); a config with RoPE
    scaling derives another length, so the context is not judged there."""
    text = _text_config(config)
    problems = []
    heads = text.get("num_attention_heads")
    if engine == "vllm" and isinstance(heads, int) and heads % tp:
        problems.append(
            Problem(
                setting,
                f"tensor_parallel {tp}: the model has {heads} attention heads, and vLLM {release} requires "
                f"them divisible by TP ({HEADS_RULE})",
                f"use a TP that divides {heads}",
            )
        )
    flag, rule = CONTEXT_RULES.get(engine, ("", ""))
    asked = [v for t, v in pairwise(argv) if t == flag] + [
        t.split("=", 1)[1] for t in argv if t.startswith(f"{flag}=")
    ]
    asked = asked if flag else []
    limit = text.get("max_position_embeddings")
    longer = asked and asked[-1].isdigit() and isinstance(limit, int) and int(asked[-1]) > limit
    override = text.get("model_max_length")  # vLLM lets a larger one stand in for the derived length
    allowed = engine == "vllm" and isinstance(override, int) and asked and int(asked[-1]) <= override
    if longer and not text.get("rope_scaling") and not allowed:
        problems.append(
            Problem(
                setting,
                f"{flag} {asked[-1]}: the model's max_position_embeddings is {limit}, and {engine} "
                f"{release} refuses a longer context ({rule})",
                f"set {flag} to at most {limit}",
            )
        )
    return problems
