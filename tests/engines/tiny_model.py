"""Builds a tiny random Llama with its own BPE tokenizer, offline: no hub. Its head_dim is 32, the
smallest vLLM's CPU attention backend supports (vllm/v1/attention/backends/cpu_attn.py).

Runs inside the vLLM venv (it has torch, transformers and tokenizers):
    python tiny_model.py OUT_DIR [--kv-heads N] [--local-experts N]
--kv-heads 2: tensor parallelism over 2 ranks needs the KV heads divisible by TP.
--local-experts N: the dense model's config.json also says `num_local_experts: N`, so vLLM 0.32 classes
it as MoE (`get_num_experts() > 0`, vllm/transformers_utils/model_arch_config_convertor.py) and accepts
the DP supervisor and expert parallelism for it, while no MoE kernel ever runs (CPU has none for EP).
"""

import argparse
import glob
import json
import os
import sysconfig

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def main(out: str, kv_heads: int, local_experts: int) -> None:
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:300]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=2048,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 32: the CPU attention backend's smallest
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    if local_experts:
        path = os.path.join(out, "config.json")
        with open(path) as handle:
            data = json.load(handle)
        data["num_local_experts"] = local_experts
        with open(path, "w") as handle:
            json.dump(data, handle, indent=2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--kv-heads", type=int, default=1)
    parser.add_argument("--local-experts", type=int, default=0)
    args = parser.parse_args()
    main(args.out, args.kv_heads, args.local_experts)
