"""One key space across engine versions and engines.

Keys take vLLM's engine-argument names (the reference engine uses them too); a setting
another engine spells differently, or an older vLLM printed under another name, is renamed
here, and `compilation_config` is flattened so its CUDA-graph settings diff like any other.
Only settings with the same meaning are renamed across engines: SGLang's
`chunked_prefill_size` (a per-request chunk) is not vLLM's `max_num_batched_tokens` (a
per-step budget), so it keeps its own name. Inverted flags (`disable_radix_cache`) become
the positive setting with the value flipped, and values printed in another unit than the
flag takes (`swap_space_bytes`) are converted to the flag's unit.
"""

from __future__ import annotations

from typing import Any

# Renames shared by every vLLM version: the V0/V1 config line, the CLI, the metric labels.
_VLLM = {
    "max_seq_len": "max_model_len",
    "chunked_prefill_enabled": "enable_chunked_prefill",
    "compilation_config.cudagraph_mode": "cudagraph_mode",
    "compilation_config.cudagraph_capture_sizes": "cudagraph_capture_sizes",
    "compilation_config.capture_sizes": "cudagraph_capture_sizes",
    "compilation_config.max_capture_size": "cudagraph_max_capture_size",
    "compilation_config.max_cudagraph_capture_size": "cudagraph_max_capture_size",
    "compilation_config.level": "compilation_mode",
    "compilation_config.mode": "compilation_mode",
    "compilation_config.full_cuda_graph": "cudagraph_full",
    "compilation_config.use_cudagraph": "cudagraph_enabled",
    "max_cudagraph_capture_size": "cudagraph_max_capture_size",
    "num_gpu_blocks_override": "num_gpu_blocks",
    "cache_dtype": "kv_cache_dtype",  # vllm:cache_config_info label
    "kv_cache_size_tokens": "kv_cache_tokens",  # the label of what the log's "KV cache size" says
    "disable_log_requests": "!enable_log_requests",
    "no_enable_prefix_caching": "!enable_prefix_caching",
    "no_async_scheduling": "!async_scheduling",
    "model_tag": "",  # the positional model: a duplicate of `model`
}

_SGLANG = {
    "model_path": "model",
    "tp_size": "tensor_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "dp_size": "data_parallel_size",
    "ep_size": "expert_parallel_size",
    "context_length": "max_model_len",
    "max_running_requests": "max_num_seqs",
    "random_seed": "seed",
    "page_size": "block_size",
    "schedule_policy": "scheduling_policy",
    "disable_radix_cache": "!enable_prefix_caching",
    "disable_cuda_graph": "enforce_eager",
    "disable_cuda_graph_padding": "!cudagraph_padding",
    "cuda_graph_max_bs": "cudagraph_max_capture_size",
    "cuda_graph_bs": "cudagraph_capture_sizes",
    # SGLang's overlap scheduler hides the CPU's scheduling of the next batch behind the
    # GPU's current one: the same mechanism as vLLM's async scheduling.
    "disable_overlap_schedule": "!async_scheduling",
}

_TRTLLM = {
    "tp_size": "tensor_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "ep_size": "expert_parallel_size",
    "max_batch_size": "max_num_seqs",
    "max_num_tokens": "max_num_batched_tokens",
    "max_seq_len": "max_model_len",
    "kv_cache_config.dtype": "kv_cache_dtype",
    "kv_cache_config.enable_block_reuse": "enable_prefix_caching",
    "kv_cache_config.tokens_per_block": "block_size",
    "tokens_per_block": "block_size",
    "cuda_graph_config.max_batch_size": "cudagraph_max_capture_size",
    "cuda_graph_config.batch_sizes": "cudagraph_capture_sizes",
    "cuda_graph_config.enable_padding": "cudagraph_padding",
    "enable_chunked_prefill": "enable_chunked_prefill",
}

RENAMES: dict[str, dict[str, str]] = {"vllm": _VLLM, "sglang": _SGLANG, "trtllm": _TRTLLM,
                                      "reference": {}, "unknown": _VLLM}

# vLLM's CUDAGraphMode: NONE=0, PIECEWISE=1, FULL=2, FULL_DECODE_ONLY=(FULL, NONE),
# FULL_AND_PIECEWISE=(FULL, PIECEWISE); JSON logs print the tuple as a list.
_CUDAGRAPH_MODES = {0: "NONE", 1: "PIECEWISE", 2: "FULL", (2, 0): "FULL_DECODE_ONLY",
                    (2, 1): "FULL_AND_PIECEWISE"}
# CompilationLevel (older) and CompilationMode (newer) share their integer values.
_COMPILATION_MODES = {0: "NONE", 1: "STOCK_TORCH_COMPILE", 2: "DYNAMO_TRACE_ONCE",
                      3: "VLLM_COMPILE"}
_COMPILATION_ALIASES = {"NO_COMPILATION": "NONE", "DYNAMO_AS_IS": "STOCK_TORCH_COMPILE",
                        "DYNAMO_ONCE": "DYNAMO_TRACE_ONCE", "PIECEWISE": "VLLM_COMPILE"}
_DTYPES = {"torch.bfloat16": "bfloat16", "bf16": "bfloat16", "torch.float16": "float16",
           "fp16": "float16", "half": "float16", "torch.float32": "float32", "fp32": "float32",
           "float": "float32"}


def canonical_key(engine: str, raw: str) -> tuple[str, bool]:
    """(normalised key, value inverted); an empty key means the setting is dropped."""
    name = RENAMES.get(engine, _VLLM).get(raw, raw)
    if name.startswith("!"):
        return name[1:], True
    return name, False


def _cudagraph_mode(v: Any) -> Any:
    if isinstance(v, list):
        v = tuple(v)
    if isinstance(v, int | tuple) and v in _CUDAGRAPH_MODES:
        return _CUDAGRAPH_MODES[v]
    return v.upper() if isinstance(v, str) else v


def _compilation_mode(v: Any) -> Any:
    if isinstance(v, int) and v in _COMPILATION_MODES:
        return _COMPILATION_MODES[v]
    if isinstance(v, str):
        return _COMPILATION_ALIASES.get(v.upper(), v.upper())
    return v


def _sizes(v: Any) -> Any:
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return sorted(set(v))
    return v


def canonical_value(key: str, value: Any, inverted: bool = False) -> Any:
    if inverted and isinstance(value, bool):
        value = not value
    if key == "cudagraph_mode":
        return _cudagraph_mode(value)
    if key == "compilation_mode":
        return _compilation_mode(value)
    if key == "cudagraph_capture_sizes":
        return _sizes(value)
    if key in ("dtype", "kv_cache_dtype") and isinstance(value, str):
        return _DTYPES.get(value.lower(), value.lower())
    if key == "scheduling_policy" and isinstance(value, str):
        return value.lower()
    return value


# Settings printed in another unit than the command line takes: (name, factor to it).
UNITS = {"swap_space_bytes": ("swap_space", 1 / 2**30),  # vllm:cache_config_info label, GiB flag
         "cpu_offload_bytes": ("cpu_offload_gb", 1 / 1e9)}


def normalise(engine: str, raw_key: str, value: Any) -> tuple[str, Any]:
    leaf = raw_key.rsplit(".", 1)[-1]
    if leaf in UNITS and isinstance(value, int | float) and not isinstance(value, bool):
        name, factor = UNITS[leaf]
        return normalise(engine, raw_key[: len(raw_key) - len(leaf)] + name, round(value * factor, 6))
    key, inverted = canonical_key(engine, raw_key)
    return key, canonical_value(key, value, inverted)


def effective(values: dict[str, Any]) -> dict[str, Any]:
    """Settings another setting overrides, made explicit: with `enforce_eager` no CUDA graph
    is captured whatever the graph settings say, so the diff compares what the engine did."""
    out = dict(values)
    if out.get("enforce_eager") is True:
        out["cudagraph_mode"] = "NONE"
    elif out.get("engine_v1") is False and out.get("enforce_eager") is False:
        # V0 had no graph-mode setting: without --enforce-eager its model runner always
        # captured whole decode steps and ran prefill eagerly.
        out.setdefault("cudagraph_mode", "FULL_DECODE_ONLY")
    # vLLM V0 without chunked prefill: the budget must hold a whole prompt, so an unset
    # budget became max(max_model_len, 2048) (its SchedulerConfig).
    if (out.get("engine_v1") is False and out.get("enable_chunked_prefill") is False
            and out.get("max_num_batched_tokens") is None and isinstance(out.get("max_model_len"), int)):
        out["max_num_batched_tokens"] = max(out["max_model_len"], 2048)
    return out
