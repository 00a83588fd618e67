"""Bundled model configs, as the `config.json` each model publishes on Hugging Face.

Only the fields the arithmetic reads are kept (plus a few identifying ones); they are parsed
by the same code that reads a user's own `config.json`, so the catalog cannot drift from
the parser. Parameter counts are never stored here: they are derived from these shapes.
"""

from __future__ import annotations

from typing import Any

_LLAMA_31_BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}

# name -> (config.json, aliases). Names are the Hugging Face repository ids.
CATALOG: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "meta-llama/Llama-3.1-8B": (
        {
            **_LLAMA_31_BASE,
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
        },
        ("llama-3-8b", "llama3-8b", "llama-3.1-8b-instruct", "meta-llama-3.1-8b"),
    ),
    "meta-llama/Llama-3.3-70B-Instruct": (
        {
            **_LLAMA_31_BASE,
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
            "num_key_value_heads": 8,
            "head_dim": 128,
        },
        ("llama-3.3-70b", "llama-3.1-70b", "llama-3.1-70b-instruct", "llama-3-70b", "llama3-70b"),
    ),
    "meta-llama/Llama-3.1-405B": (
        {
            **_LLAMA_31_BASE,
            "hidden_size": 16384,
            "intermediate_size": 53248,
            "num_attention_heads": 128,
            "num_hidden_layers": 126,
            "num_key_value_heads": 8,
            "head_dim": 128,
        },
        ("llama-3.1-405b-instruct", "llama3-405b"),
    ),
    "Qwen/Qwen2.5-7B": (
        {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_act": "silu",
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "max_position_embeddings": 131072,
            "max_window_layers": 28,
            "num_attention_heads": 28,
            "num_hidden_layers": 28,
            "num_key_value_heads": 4,
            "rope_theta": 1000000.0,
            "sliding_window": 131072,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 152064,
        },
        ("qwen2.5-7b-instruct",),
    ),
    "Qwen/Qwen2.5-3B": (
        {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_act": "silu",
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "max_position_embeddings": 32768,
            "max_window_layers": 36,
            "num_attention_heads": 16,
            "num_hidden_layers": 36,
            "num_key_value_heads": 2,
            "rope_theta": 1000000.0,
            "sliding_window": 32768,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 151936,
        },
        ("qwen2.5-3b-instruct",),
    ),
    "Qwen/Qwen2.5-72B": (
        {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_act": "silu",
            "hidden_size": 8192,
            "intermediate_size": 29568,
            "max_position_embeddings": 131072,
            "max_window_layers": 80,
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
            "num_key_value_heads": 8,
            "rope_theta": 1000000.0,
            "sliding_window": 131072,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_sliding_window": False,
            "vocab_size": 152064,
        },
        ("qwen2.5-72b-instruct",),
    ),
    "mistralai/Mixtral-8x7B-v0.1": (
        {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "hidden_act": "silu",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "num_attention_heads": 32,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "num_local_experts": 8,
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32000,
        },
        ("mixtral-8x7b", "mixtral-8x7b-instruct-v0.1", "mixtral"),
    ),
    "deepseek-ai/DeepSeek-V3": (
        {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "first_k_dense_replace": 3,
            "hidden_act": "silu",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "kv_lora_rank": 512,
            "max_position_embeddings": 163840,
            "moe_intermediate_size": 2048,
            "moe_layer_freq": 1,
            "n_group": 8,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "norm_topk_prob": True,
            "num_attention_heads": 128,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 61,
            "num_key_value_heads": 128,
            "num_nextn_predict_layers": 1,
            "q_lora_rank": 1536,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "rope_theta": 10000,
            "routed_scaling_factor": 2.5,
            "scoring_func": "sigmoid",
            "tie_word_embeddings": False,
            "topk_group": 4,
            "topk_method": "noaux_tc",
            "torch_dtype": "bfloat16",
            "v_head_dim": 128,
            "vocab_size": 129280,
        },
        ("deepseek-v3", "deepseek-v3-0324", "deepseek-r1", "deepseek-ai/DeepSeek-R1"),
    ),
    "google/gemma-2-9b": (
        {
            "architectures": ["Gemma2ForCausalLM"],
            "model_type": "gemma2",
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 3584,
            "intermediate_size": 14336,
            "max_position_embeddings": 8192,
            "num_attention_heads": 16,
            "num_hidden_layers": 42,
            "num_key_value_heads": 8,
            "query_pre_attn_scalar": 256,
            "sliding_window": 4096,
            "torch_dtype": "float32",
            "vocab_size": 256000,
        },
        ("gemma-2-9b-it", "gemma2-9b"),
    ),
    "mistralai/Mistral-7B-v0.1": (
        {
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "hidden_act": "silu",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 32000,
        },
        ("mistral-7b",),
    ),
}

_INSTRUCT = (
    "the instruct fine-tune has the base model's shapes; its own config.json may set another "
    "max_position_embeddings, so give --max-model-len or pass that config.json"
)
_LLAMA_3 = (
    "Llama 3 has the shapes of Llama 3.1 but was trained for 8,192 tokens "
    "(max_position_embeddings 8192): give --max-model-len 8192"
)
_LLAMA_31_70B = "same architecture and size as Llama 3.1 70B; the catalog carries 3.3"
_DEEPSEEK_R1 = "DeepSeek-R1 is trained from DeepSeek-V3-Base: same architecture and size"

# Aliases that name another checkpoint than the entry they resolve to, and why the entry
# answers for it (keys as listed in CATALOG). Every output of a calculator repeats the note.
ALIAS_NOTES: dict[str, str] = {
    "llama-3-8b": _LLAMA_3,
    "llama3-8b": _LLAMA_3,
    "llama-3.1-8b-instruct": _INSTRUCT,
    "llama-3.1-70b": _LLAMA_31_70B,
    "llama-3.1-70b-instruct": _LLAMA_31_70B,
    "llama-3-70b": _LLAMA_3,
    "llama3-70b": _LLAMA_3,
    "llama-3.1-405b-instruct": _INSTRUCT,
    "qwen2.5-7b-instruct": _INSTRUCT,
    "qwen2.5-3b-instruct": _INSTRUCT,
    "qwen2.5-72b-instruct": _INSTRUCT,
    "mixtral-8x7b-instruct-v0.1": _INSTRUCT,
    "mixtral": "the catalog's Mixtral is 8x7B; for 8x22B pass its config.json",
    "deepseek-v3-0324": "a later DeepSeek-V3 checkpoint: same architecture and size",
    "deepseek-r1": _DEEPSEEK_R1,
    "deepseek-ai/DeepSeek-R1": _DEEPSEEK_R1,
    "gemma-2-9b-it": _INSTRUCT,
    "mistral-7b": (
        "the catalog carries v0.1 (sliding window 4096); v0.2 and v0.3 attend over the whole "
        "context and v0.3 has a 32,768-token vocabulary: pass their config.json"
    ),
}
INSTRUCT_NOTE = _INSTRUCT
