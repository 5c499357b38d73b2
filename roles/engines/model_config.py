"""What the model's own config.json rules out, checked at `plan --model-config FILE` and in the pod
when its model is a mounted checkpoint: the engine reads it only after the image pull and scheduling
on a GPU node. Pure: the file's mapping comes in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.contract.errors import Problem
from roles.args import flag_value

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
# Where each engine enforces a rule, by function (stable across the releases the launcher ships
# catalogues for); the lines are those of vLLM 0.32.0 / 0.33.0 and SGLang 0.5.22 / 0.5.23.
HEADS_RULES = {
    "vllm": "vllm/config/model.py ModelConfig.verify_with_parallel_config",  # :1546 / :1559
    "sglang": "sglang/srt/layers/linear.py QKVParallelLinear",  # :1136 / :1139, divide()
}
# Both engines give each rank kv_heads / TP KV heads, or, when TP >= kv_heads, replicate each KV
# head TP / kv_heads times; divide() asserts either quotient exact.
KV_HEADS_RULES = {
    "vllm": "vllm/model_executor/layers/linear.py QKVParallelLinear",  # :1053-1057 / :1066-1070
    "sglang": "sglang/srt/layers/linear.py QKVParallelLinear",  # :1137-1141 / :1140-1144
}
# SGLang asserts (routed + redundant experts) % ep_size == 0 (:396 / :414). vLLM spreads uneven
# experts over its EP ranks (fused_moe/expert_map_manager.py), refusing them only under EPLB
# (fused_moe/layer.py:262 / :274), whose EP size the pool does not model: not checked there.
EXPERTS_RULE = "sglang/srt/layers/moe/fused_moe_triton/layer.py FusedMoE"
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
CONTEXT_RULES = {
    "vllm": ("--max-model-len", "vllm/config/model.py _get_and_verify_max_len"),
    "sglang": ("--context-length", "sglang/srt/configs/model_config.py ModelConfig._derive_context_length"),
}


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal checkpoint keeps the language model's numbers under text_config."""
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


def _int(text: Mapping[str, Any], *keys: str) -> int | None:
    """The first of `keys` the config gives as a positive integer."""
    values = [text.get(k) for k in keys]
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


def _sharding(
    text: Mapping[str, Any], engine: str, argv: Sequence[str], tp: int
) -> list[tuple[str, str, str]]:
    """(what, the engine's rule, the fix) for heads, KV heads and experts the engine cannot shard.
    SGLang's attention TP is TP / DP under --enable-dp-attention: its heads are not judged there;
    an MLA model (kv_lora_rank) shards no KV heads on vLLM."""
    out = []
    heads = _int(text, "num_attention_heads")
    attention_tp = engine == "vllm" or "--enable-dp-attention" not in argv
    if engine in HEADS_RULES and heads and attention_tp and heads % tp:
        out.append(
            (
                f"tensor_parallel {tp}: the model has {heads} attention heads",
                f"requires them divisible by TP ({HEADS_RULES[engine]})",
                f"use a TP that divides {heads}",
            )
        )
    kv = _int(text, "num_key_value_heads")
    mla = engine == "vllm" and "kv_lora_rank" in text
    if engine in KV_HEADS_RULES and kv and attention_tp and not mla and (kv % tp if tp < kv else tp % kv):
        out.append(
            (
                f"tensor_parallel {tp}: the model has {kv} KV heads",
                f"requires TP to divide them or be a multiple of them ({KV_HEADS_RULES[engine]})",
                f"use a TP that divides {kv} or a multiple of it",
            )
        )
    experts = _int(text, *EXPERT_KEYS)
    ep = flag_value(argv, "ep-size") or flag_value(argv, "expert-parallel-size") or flag_value(argv, "ep")
    ep_size = int(ep) if ep and ep.isdigit() else 1
    spare = flag_value(argv, "ep-num-redundant-experts") or "0"
    redundant = int(spare) if spare.isdigit() else 0
    if engine == "sglang" and experts and ep_size > 1 and (experts + redundant) % ep_size:
        out.append(
            (
                f"--ep-size {ep_size}: the model has {experts} routed experts (with {redundant} redundant)",
                f"requires them divisible by the EP size ({EXPERTS_RULE})",
                "use an --ep-size that divides them (or round up with --ep-num-redundant-experts)",
            )
        )
    return out


def model_config_problems(
    config: Mapping[str, Any],
    engine: str,
    release: str,
    argv: Sequence[str],
    tp: int,
    setting: str,
    *,
    longer_context_allowed: bool = False,
) -> list[Problem]:
    """Heads, KV heads and experts the engine cannot shard over TP/EP, and the context asked for vs
    max_position_embeddings (both engines refuse it unless one of their switches allows it:
    `longer_context_allowed`); a config with RoPE scaling derives another length, so the context is
    not judged there."""
    text = _text_config(config)
    name = f"{ENGINE_NAMES.get(engine, engine)} {release}"
    problems = [
        Problem(setting, f"{what}, and {name} {rule}", fix)
        for what, rule, fix in _sharding(text, engine, argv, tp)
    ]
    flag, rule = CONTEXT_RULES.get(engine, ("", ""))
    asked = flag_value(argv, flag) if flag else None
    limit = _int(text, "max_position_embeddings")
    longer = asked is not None and asked.isdigit() and limit is not None and int(asked) > limit
    override = _int(text, "model_max_length")  # vLLM lets a larger one stand in for the derived length
    allowed = engine == "vllm" and override is not None and asked is not None and int(asked) <= override
    if longer and not text.get("rope_scaling") and not allowed and not longer_context_allowed:
        problems.append(
            Problem(
                setting,
                f"{flag} {asked}: the model's max_position_embeddings is {limit}, and {name} refuses a "
                f"longer context ({rule})",
                f"set {flag} to at most {limit}",
            )
        )
    return problems
