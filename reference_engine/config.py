"""Every engine setting, its default, and the resolved view that `/engine/config` serves.

Names follow vLLM's engine arguments where the meaning is the same, so `infbench config
diff` can compare this engine with a real one field by field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

EXECUTORS = ("sim", "torch")
KV_CACHE_DTYPES = ("auto", "bf16", "fp16", "fp8")
# vLLM v1's default token budget for the OpenAI server on data-centre GPUs.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
REDACTED = "<redacted>"
# Each executor's model when --model is not given: the sim executor times a real model's
# shapes; the torch executor must run weights that fit on a CPU.
DEFAULT_MODELS = {"sim": "meta-llama/Llama-3.1-8B", "torch": "tiny-llama"}


class ConfigError(ValueError):
    """A setting is invalid; the message names the field."""


@dataclass
class EngineConfig:
    executor: str = "sim"
    model: str = ""                             # "" -> DEFAULT_MODELS[executor]
    served_model_name: str | None = None       # name reported by /v1/models; None -> model
    gpu: str = "H100-SXM"                       # the sim executor's roofline GPU
    device: str = "auto"                        # torch executor: "cpu", "cuda" or "auto"
    dtype: str = "bf16"                         # weight format for the roofline and memory plan
    kv_cache_dtype: str = "auto"                # "auto" follows dtype
    tensor_parallel_size: int = 1
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks: int | None = None           # overrides the memory plan (vLLM: num_gpu_blocks_override)
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None   # None -> DEFAULT_MAX_NUM_BATCHED_TOKENS (or max_model_len without chunking)
    max_model_len: int = 8192
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    api_key: str | None = None
    faults: list[str] = field(default_factory=list)  # `--fault` specs, parsed by faults.py
    host: str = "127.0.0.1"
    port: int = 8000
    seed: int = 0
    step_overhead_ms: float = 0.5               # sim: fixed host/launch cost added to every step
    sim_eos_probability: float = 0.0            # sim: chance a synthetic token is EOS
    # sim: each prompt's natural answer length (tokens before EOS) is lognormal with this median
    # and sigma, floored at 16, as a chat model's answers are; 0 = never stop before max_tokens.
    sim_output_median: int = 192
    sim_output_sigma: float = 0.7
    step_log_size: int = 10000                  # per-step records kept in the ring buffer
    stream_byte_budget: int = 1 << 20           # server: pending bytes per connection before cancel

    def __post_init__(self) -> None:
        if self.executor in DEFAULT_MODELS and not self.model:
            self.model = DEFAULT_MODELS[self.executor]
        self._validate()

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model

    @property
    def weight_format(self) -> str:
        return self.dtype

    @property
    def kv_format(self) -> str:
        return self.dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype

    @property
    def token_budget(self) -> int:
        """The effective per-step token budget (max_num_batched_tokens after defaulting)."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        if self.enable_chunked_prefill:
            return DEFAULT_MAX_NUM_BATCHED_TOKENS
        # Without chunking a whole prompt must fit in one step, as in vLLM.
        return max(self.max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)

    def _validate(self) -> None:
        def positive(name: str) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")

        if self.executor not in EXECUTORS:
            raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                              f"got {self.kv_cache_dtype!r}")
        for name in ("tensor_parallel_size", "block_size", "max_num_seqs", "max_model_len",
                     "step_log_size", "stream_byte_budget"):
            positive(name)
        for name in ("num_gpu_blocks", "max_num_batched_tokens"):
            if getattr(self, name) is not None:
                positive(name)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError("gpu_memory_utilization must be in (0, 1], "
                              f"got {self.gpu_memory_utilization}")
        if not 0.0 <= self.sim_eos_probability <= 1.0:
            raise ConfigError(f"sim_eos_probability must be in [0, 1], got {self.sim_eos_probability}")
        if self.sim_output_median < 0 or not self.sim_output_sigma >= 0.0:
            raise ConfigError("sim_output_median must be >= 0 and sim_output_sigma >= 0, got "
                              f"{self.sim_output_median} and {self.sim_output_sigma}")
        if not self.step_overhead_ms >= 0.0:
            raise ConfigError(f"step_overhead_ms must be >= 0, got {self.step_overhead_ms}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {self.port}")
        if not self.enable_chunked_prefill and self.token_budget < self.max_model_len:
            raise ConfigError(
                f"max_num_batched_tokens ({self.token_budget}) must be >= max_model_len "
                f"({self.max_model_len}) when chunked prefill is disabled: a prompt could never "
                "be scheduled")
        if self.token_budget < self.max_num_seqs:
            raise ConfigError(f"max_num_batched_tokens ({self.token_budget}) must be >= "
                              f"max_num_seqs ({self.max_num_seqs})")

    def replace(self, **changes: Any) -> EngineConfig:
        return dataclasses.replace(self, **changes)

    def resolved(self) -> dict[str, dict[str, Any]]:
        """Every setting with its effective value and whether it is the default.

        The API key's value never appears, only whether one is set.
        """
        out: dict[str, dict[str, Any]] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            is_default = value == default
            if f.name == "model":
                is_default = value == DEFAULT_MODELS[self.executor]
            if f.name == "max_num_batched_tokens":
                value = self.token_budget
            elif f.name == "served_model_name":
                value = self.model_name
            elif f.name == "api_key":
                value = REDACTED if value is not None else None
            elif isinstance(value, list):
                value = list(value)
            out[f.name] = {"value": value, "default": is_default}
        return out
