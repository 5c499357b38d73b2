"""Builds a tiny random Llama with its own BPE tokenizer, offline: no hub. Its head_dim is 32, the
smallest vLLM's CPU attention backend supports (vllm/v1/attention/backends/cpu_attn.py).

Runs inside the vLLM venv (it has torch, transformers and tokenizers): python tiny_model.py OUT_DIR
"""

import glob
import os
import sys
import sysconfig

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def main(out: str) -> None:
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
        num_key_value_heads=1,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    main(sys.argv[1])
