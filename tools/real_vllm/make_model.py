"""Writes a tiny Llama with seeded random weights and a locally trained byte-level BPE tokenizer
into a folder vLLM serves like any Hugging Face model. Runs inside the vLLM environment (it
needs transformers, tokenizers and torch); nothing is fetched from a hub.

    python make_model.py OUT_DIR

Generated text is noise; timing, sizing, /tokenize, prefix caching and every metric are real.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

VOCAB = 4096
# Llama's own layout, only small: 4 layers of width 256, grouped-query attention (8 query
# heads sharing 4 KV heads), long enough context for the prompt sizes the tests send.
CONFIG = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096,
              rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, torch_dtype="bfloat16")
SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def corpus() -> list[str]:
    # The interpreter's own standard library: on every machine, the same text for one Python
    # version, so the tokenizer (and every prompt's token count) is reproducible.
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in lib.glob("*.py"))[:160]
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def make_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def make_weights(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, **CONFIG)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    make_tokenizer(out)
    make_weights(out)
    print(f"tiny llama written to {out}")


if __name__ == "__main__":
    main()
