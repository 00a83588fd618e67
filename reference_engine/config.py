"""Every engine setting, its default, and the resolved view that `/engine/config` serves.

Names follow vLLM's engine arguments where the meaning is the same, so `infbench config
diff` can compare this engine with a real one field by field.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXECUTORS = ("sim", "torch")
KV_CACHE_DTYPES = ("auto", "bf16", "fp16", "fp8")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
SCHEDULING_POLICIES = ("fcfs", "priority", "fair")
# The batch sizes vLLM captures by default: 1, 2, 4, then every 8 up to 256, every 16 above.
DEFAULT_CAPTURE_SIZES = (1, 2, 4, *range(8, 257, 8), *range(272, 1025, 16))
# vLLM v1's default token budget for the OpenAI server on data-centre GPUs.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
REDACTED = "<redacted>"
# Each executor's model when --model is not given: the sim executor times a real model's
# shapes; the torch executor must run weights that fit on a CPU.
DEFAULT_MODELS = {"sim": "meta-llama/Llama-3.1-8B", "torch": "tiny-llama"}


class ConfigError(ValueError):
    """A setting is invalid; the message names the field."""


DEFAULTS_DIR = Path(__file__).parent / "defaults"
# Settings a default set may not choose: where and how the engine runs, not what it does.
_NOT_DEFAULTS = {"executor", "model", "served_model_name", "gpu", "device", "api_key", "faults",
                 "host", "port", "defaults", "profile_dir", "profile_steps", "dump_dir"}


@functools.cache
def default_set(name: str) -> dict[str, Any]:
    """The defaults of a "version": `builtin` (the dataclass's), a shipped set
    (reference_engine/defaults/NAME.toml) or a TOML file with a [defaults] table."""
    if name == "builtin":
        return {}
    path = Path(name) if name.endswith(".toml") else DEFAULTS_DIR / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(["builtin", *sorted(p.stem for p in DEFAULTS_DIR.glob("*.toml"))])
        raise ConfigError(f"defaults: {name!r} is neither a shipped default set ({known}) nor a .toml file")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"defaults: {path} is not valid TOML ({exc})") from None
    values = doc.get("defaults")
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    if not isinstance(values, dict):
        raise ConfigError(f"defaults: {path} has no [defaults] table")
    for key in values:
        if key not in fields or key in _NOT_DEFAULTS:
            raise ConfigError(f"defaults: {path}: {key!r} is not a setting a default set may choose")
    return dict(values)


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
    # sim: chance that a greedy token continues what followed the last 3 tokens earlier in
    # the context (a model copying from its prompt, as on code edits or quoted text): what
    # gives n-gram drafts something to hit (sim_copy.py). 0 = tokens never copy.
    sim_copy_probability: float = 0.0
    # vLLM's --speculative-config: {"method": "ngram", "num_speculative_tokens": K, ...}
    # (spec_decode.py); None = no speculative decoding.
    speculative_config: dict[str, Any] | None = None
    # LoRA adapters, vLLM's flags (lora.py): serve them, at most max_loras distinct adapters in
    # a batch (vLLM's default 1), ranks up to max_lora_rank (vLLM's default 16), NAME=PATH each
    # (PATH holds peft's adapter_config.json). sim: each adapter in a step adds this much per
    # layer beside its shrink/expand FLOPs and weight reads.
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    lora_modules: list[str] = field(default_factory=list)
    sim_lora_launch_us: float = 3.0
    # Structured output (structured_output.py, which says whose semantics these follow): a
    # cold schema's compile costs base + per KiB of its text; compiles run on this many
    # threads (vLLM: a ThreadPoolExecutor) and are cached, this many grammars at most (LRU,
    # 0 = off; vLLM bounds xgrammar's by VLLM_XGRAMMAR_CACHE_MB); each step's token mask
    # costs this much per structured sequence and overlaps the forward pass unless off
    # (vLLM's EngineCore.step overlaps it; SGLang's --disable-overlap-schedule does not).
    grammar_compile_base_ms: float = 5.0
    grammar_compile_ms_per_kib: float = 40.0
    grammar_compile_workers: int = 2
    grammar_cache_size: int = 64
    grammar_mask_us_per_seq: float = 40.0
    grammar_mask_overlap: bool = True
    step_log_size: int = 10000                  # per-step records kept in the ring buffer
    stream_byte_budget: int = 1 << 20           # server: pending bytes per connection before cancel
    # The knobs engine versions moved (infbench config diff/bisect); see defaults.py for sets.
    enforce_eager: bool = False                 # no CUDA graphs: every decode step pays launches
    cudagraph_mode: str = "FULL_AND_PIECEWISE"  # which decode steps replay a graph
    cudagraph_capture_sizes: list[int] | None = None  # None -> DEFAULT_CAPTURE_SIZES up to the cap
    cudagraph_max_capture_size: int | None = None     # None -> min(2 * max_num_seqs, 512)
    async_scheduling: bool = False              # host work per step hidden behind the device step
    stream_interval: int = 1                    # tokens per streamed event (the first goes at once)
    scheduling_policy: str = "fcfs"             # fcfs | priority (the request's `priority`, low first) | fair
    # fair: each tenant's (request `user`) weight in the fair share; a tenant not named has 1.
    tenant_weights: dict[str, float] | None = None
    metrics_names: str = "vllm"                 # /metrics names: vllm, vllm-legacy (pre-0.9/0.11 renames), sglang
    defaults: str = "builtin"                   # the default set these values came from
    profile_dir: str | None = None              # where /stop_profile writes traces (vLLM: VLLM_TORCH_PROFILER_DIR)
    profile_steps: str | None = None            # "START:COUNT": profile those steps without the endpoints
    # Tensor parallelism (torch executor): each rank writes its collective log here, in Flight
    # Recorder's pickle format, as DIR/rank_<R> (on a watchdog timeout and on request).
    dump_dir: str | None = None
    collective_timeout_s: float = 30.0          # a collective running longer trips the watchdog

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
    def capture_sizes(self) -> tuple[int, ...]:
        """Decode batch sizes replayed from CUDA graphs, ascending; empty when eager."""
        if self.enforce_eager or self.cudagraph_mode == "NONE":
            return ()
        cap = self.cudagraph_max_capture_size
        if cap is None:
            cap = min(2 * self.max_num_seqs, 512)
        sizes = self.cudagraph_capture_sizes if self.cudagraph_capture_sizes is not None \
            else DEFAULT_CAPTURE_SIZES
        return tuple(sorted({s for s in sizes if s <= cap}))

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
        if not (isinstance(self.collective_timeout_s, (int, float))
                and 0.0 < self.collective_timeout_s < float("inf")):
            raise ConfigError(f"collective_timeout_s must be a positive number of seconds, "
                              f"got {self.collective_timeout_s!r}")
        if not 0.0 <= self.sim_copy_probability <= 1.0:
            raise ConfigError(f"sim_copy_probability must be in [0, 1], got {self.sim_copy_probability}")
        if self.speculative_config is not None:
            from reference_engine.spec_decode import SpeculativeConfig
            try:
                spec = SpeculativeConfig.parse(self.speculative_config)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            if self.tensor_parallel_size > 1 and self.executor == "torch":
                raise ConfigError("speculative_config: the torch executor verifies drafts at "
                                  "tensor_parallel_size 1 only")
            if spec.method == "draft_model" and self.executor != "sim":
                raise ConfigError("speculative_config: method draft_model is priced by the sim "
                                  "executor only (the torch executor has no draft model)")
        _check_grammar(self)
        _check_lora(self)
        if not self.step_overhead_ms >= 0.0:
            raise ConfigError(f"step_overhead_ms must be >= 0, got {self.step_overhead_ms}")
        if self.metrics_names not in ("vllm", "vllm-legacy", "sglang"):
            raise ConfigError("metrics_names must be vllm, vllm-legacy or sglang, got "
                              f"{self.metrics_names!r}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {self.port}")
        if self.cudagraph_mode not in CUDAGRAPH_MODES:
            raise ConfigError(f"cudagraph_mode must be one of {', '.join(CUDAGRAPH_MODES)}, "
                              f"got {self.cudagraph_mode!r}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ConfigError(f"scheduling_policy must be one of {', '.join(SCHEDULING_POLICIES)}, "
                              f"got {self.scheduling_policy!r}")
        _check_tenant_weights(self)
        positive("stream_interval")
        if self.cudagraph_max_capture_size is not None and (
                not isinstance(self.cudagraph_max_capture_size, int) or self.cudagraph_max_capture_size < 0):
            raise ConfigError("cudagraph_max_capture_size must be an integer >= 0, got "
                              f"{self.cudagraph_max_capture_size!r}")
        sizes = self.cudagraph_capture_sizes
        if sizes is not None and (not isinstance(sizes, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in sizes)):
            raise ConfigError(f"cudagraph_capture_sizes must be positive integers, got {sizes!r}")
        if not self.enable_chunked_prefill and self.token_budget < self.max_model_len:
            raise ConfigError(
                f"max_num_batched_tokens ({self.token_budget}) must be >= max_model_len "
                f"({self.max_model_len}) when chunked prefill is disabled: a prompt could never "
                "be scheduled")
        if self.token_budget < self.max_num_seqs:
            raise ConfigError(f"max_num_batched_tokens ({self.token_budget}) must be >= "
                              f"max_num_seqs ({self.max_num_seqs})")

    @classmethod
    def with_defaults(cls, defaults: str = "builtin", **given: Any) -> EngineConfig:
        """A config from a default set, with the settings given on top."""
        return cls(**{**default_set(defaults), **given, "defaults": defaults})

    def vllm_config_line(self) -> str:
        """The resolved config as vLLM's engine core logs it ("Initializing a V1 LLM engine
        (vX) with config: ..."), so the tools that read vLLM logs read this engine's too."""
        r = {k: v["value"] for k, v in self.resolved().items()}
        modes = {"NONE": 0, "PIECEWISE": 1, "FULL": 2, "FULL_DECODE_ONLY": (2, 0),
                 "FULL_AND_PIECEWISE": (2, 1)}
        mode = "NONE" if self.enforce_eager else self.cudagraph_mode
        compilation = {"cudagraph_mode": f"<CUDAGraphMode.{mode}: {modes[mode]}>",
                       "cudagraph_capture_sizes": r["cudagraph_capture_sizes"],
                       "max_cudagraph_capture_size": r["cudagraph_max_capture_size"]}
        comp = "{" + ", ".join(f"{k!r}: {v if k == 'cudagraph_mode' else repr(v)}"
                               for k, v in compilation.items()) + "}"
        fields = [("model", self.model), ("served_model_name", self.model_name), ("dtype", self.dtype),
                  ("max_seq_len", self.max_model_len), ("tensor_parallel_size", self.tensor_parallel_size),
                  ("enforce_eager", self.enforce_eager), ("kv_cache_dtype", self.kv_cache_dtype),
                  ("seed", self.seed), ("enable_prefix_caching", self.enable_prefix_caching),
                  ("enable_chunked_prefill", self.enable_chunked_prefill),
                  ("max_num_seqs", self.max_num_seqs), ("max_num_batched_tokens", self.token_budget),
                  ("block_size", self.block_size), ("gpu_memory_utilization", self.gpu_memory_utilization),
                  ("async_scheduling", self.async_scheduling), ("stream_interval", self.stream_interval),
                  ("scheduling_policy", self.scheduling_policy), ("gpu", self.gpu)]
        body = ", ".join(f"{k}={v!r}" for k, v in fields)
        return (f"Initializing a V1 LLM engine (vreference-{self.defaults}) with config: "
                f"{body}, compilation_config={comp}")

    def replace(self, **changes: Any) -> EngineConfig:
        return dataclasses.replace(self, **changes)

    def resolved(self) -> dict[str, dict[str, Any]]:
        """Every setting with its effective value and whether it is the default.

        The API key's value never appears, only whether one is set.
        """
        out: dict[str, dict[str, Any]] = {}
        chosen = default_set(self.defaults)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            is_default = value == chosen.get(f.name, default)
            if f.name == "model":
                is_default = value == DEFAULT_MODELS[self.executor]
            if f.name == "max_num_batched_tokens":
                value = self.token_budget
            elif f.name == "cudagraph_capture_sizes":
                value = list(self.capture_sizes)
            elif f.name == "cudagraph_max_capture_size":
                value = self.capture_sizes[-1] if self.capture_sizes else 0
            elif f.name == "served_model_name":
                value = self.model_name
            elif f.name == "api_key":
                value = REDACTED if value is not None else None
            elif isinstance(value, list):
                value = list(value)
            out[f.name] = {"value": value, "default": is_default}
        return out


def _check_grammar(c: EngineConfig) -> None:
    for name in ("grammar_compile_base_ms", "grammar_compile_ms_per_kib", "grammar_mask_us_per_seq"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < float("inf"):
            raise ConfigError(f"{name} must be a number >= 0, got {value!r}")
    if isinstance(c.grammar_cache_size, bool) or not isinstance(c.grammar_cache_size, int) \
            or c.grammar_cache_size < 0:
        raise ConfigError(f"grammar_cache_size must be an integer >= 0, got {c.grammar_cache_size!r}")
    if isinstance(c.grammar_compile_workers, bool) or not isinstance(c.grammar_compile_workers, int) \
            or c.grammar_compile_workers < 1:
        raise ConfigError("grammar_compile_workers must be a positive integer, got "
                          f"{c.grammar_compile_workers!r}")


def _check_tenant_weights(c: EngineConfig) -> None:
    weights = c.tenant_weights
    if weights is None:
        return
    if c.scheduling_policy != "fair":
        raise ConfigError("tenant_weights apply to scheduling_policy fair, got scheduling_policy "
                          f"{c.scheduling_policy!r}")
    if not isinstance(weights, dict):
        raise ConfigError(f"tenant_weights must map tenant names to weights, got {weights!r}")
    for name, w in weights.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"tenant_weights: a tenant name must be a non-empty string, got {name!r}")
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0.0 < w < float("inf"):
            raise ConfigError(f"tenant_weights: tenant {name!r} has weight {w!r}; a weight is a "
                              "number > 0")


def _check_lora(c: EngineConfig) -> None:
    for name in ("max_loras", "max_lora_rank"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if not isinstance(c.sim_lora_launch_us, int | float) or isinstance(c.sim_lora_launch_us, bool) \
            or not 0.0 <= c.sim_lora_launch_us < float("inf"):
        raise ConfigError(f"sim_lora_launch_us must be a number >= 0, got {c.sim_lora_launch_us!r}")
    if c.lora_modules and not c.enable_lora:
        raise ConfigError("lora_modules: serving adapters needs enable_lora (--enable-lora)")
    if c.enable_lora and c.executor != "sim":
        raise ConfigError("enable_lora: adapters are priced by the sim executor only (the torch "
                          "executor has no adapter weights)")
