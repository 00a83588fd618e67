"""What each engine's start-up memory lines say, as (phase, key, value, unit) figures.

vLLM's and SGLang's messages, in the wordings of the versions in
`tests/fixtures/startup_logs/SOURCES.md`. Both engines divide by 2**30 and print "GiB" (vLLM
>= 0.6.5) or "GB" (vLLM <= 0.6.4 weights, SGLang): every size is read as GiB.

Phases, in the order engines take them: `weights` (loaded, their size and time), `profile`
(the profile run: peak activation, non-torch memory, the budget it worked from),
`cuda_graphs` (the capture or its estimate), `kv_cache` (the pool in bytes, tokens, blocks;
max concurrency), `ready`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

GIB = 1 << 30


@dataclass(frozen=True)
class Figure:
    phase: str
    key: str
    value: float | None
    unit: str | None


@dataclass(frozen=True)
class Failure:
    kind: str                    # kv_cache_too_small | no_kv_memory | oom | cuda_graph_oom | not_enough_memory
    phase: str | None            # where it stopped; None: decided from the phases before it
    figures: tuple[Figure, ...] = ()


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _gib(s: str) -> float:
    return _num(s) * GIB


Handler = Callable[[re.Match[str]], list[Figure]]
_RULES: list[tuple[str, re.Pattern[str], Handler]] = []


def rule(engine: str, pattern: str) -> Callable[[Handler], Handler]:
    def add(fn: Handler) -> Handler:
        _RULES.append((engine, re.compile(pattern), fn))
        return fn
    return add


# ---- vLLM --------------------------------------------------------------------------------
@rule("vllm", r"Loading model weights took ([\d.]+) GB")
@rule("vllm", r"Model loading took ([\d.]+) Gi?B(?: memory)?(?: and ([\d.]+) seconds)?")
def _weights(m: re.Match[str]) -> list[Figure]:
    out = [Figure("weights", "weights_bytes", _gib(m.group(1)), "bytes")]
    if m.re.groups > 1 and m.group(2):
        out.append(Figure("weights", "load_seconds", _num(m.group(2)), "seconds"))
    return out


# Loaders print these before (or, on CPU, instead of) the size in memory.
@rule("vllm", r"^Loading weights took ([\d.]+) seconds")
def _load_time(m: re.Match[str]) -> list[Figure]:
    return [Figure("weights", "weights_load_seconds", _num(m.group(1)), "seconds")]


@rule("vllm", r"Checkpoint size: ([\d.]+) GiB")
def _checkpoint(m: re.Match[str]) -> list[Figure]:
    return [Figure("weights", "checkpoint_bytes", _gib(m.group(1)), "bytes")]


@rule("vllm", r"Memory profiling results: (.*)")
def _results_line(m: re.Match[str]) -> list[Figure]:  # vLLM 0.6.4: key=value pairs
    kv = dict(re.findall(r"(\w+)=([\d.]+)", m.group(1)))
    names = {"total_gpu_memory": "total_gpu_bytes", "peak_torch_memory": "peak_torch_bytes",
             "non_torch_memory": "non_torch_bytes", "initial_memory_usage": "initial_usage_bytes"}
    out = [Figure("profile", k2, _gib(kv[k]), "bytes") for k, k2 in names.items() if k in kv]
    if "gpu_memory_utilization" in kv:
        out.append(Figure("profile", "gpu_memory_utilization", _num(kv["gpu_memory_utilization"]),
                          "ratio"))
    if "kv_cache_size" in kv:
        out.append(Figure("kv_cache", "available_kv_bytes", _gib(kv["kv_cache_size"]), "bytes"))
    return out


# vLLM 0.6.5's table: "label   value" rows under "Memory profiling results:".
_TABLE = {"duration": ("profile", "profile_seconds", "seconds"),
          "total_gpu_memory": ("profile", "total_gpu_bytes", "bytes"),
          "gpu_memory_utilization": ("profile", "gpu_memory_utilization", "ratio"),
          "the current vLLM instance can use": ("profile", "budget_bytes", "bytes"),
          "model weights take": ("weights", "weights_bytes", "bytes"),
          "non_torch_memory": ("profile", "non_torch_bytes", "bytes"),
          "PyTorch activation peak memory": ("profile", "activation_peak_bytes", "bytes"),
          "available_kv_cache_memory": ("kv_cache", "available_kv_bytes", "bytes")}


@rule("vllm", r"^(duration|total_gpu_memory|gpu_memory_utilization|the current vLLM instance "
      r"can use|model weights take|non_torch_memory|PyTorch activation peak memory|"
      r"available_kv_cache_memory)\s+([\d.]+)\s*(GiB|seconds)?$")
def _table_row(m: re.Match[str]) -> list[Figure]:
    phase, key, unit = _TABLE[m.group(1)]
    value = _gib(m.group(2)) if unit == "bytes" else _num(m.group(2))
    return [Figure(phase, key, value, unit)]


@rule("vllm", r"Memory profiling takes ([\d.]+) seconds(?:\. Total non KV cache memory: ([\d.]+)GiB; "
      r"torch peak memory increase: ([\d.]+)GiB; non-torch forward increase memory: ([\d.]+)GiB;"
      r" weights memory: ([\d.]+)GiB)?")
def _profiling(m: re.Match[str]) -> list[Figure]:
    out = [Figure("profile", "profile_seconds", _num(m.group(1)), "seconds")]
    if m.group(2):
        out += [Figure("profile", "non_kv_bytes", _gib(m.group(2)), "bytes"),
                Figure("profile", "activation_peak_bytes", _gib(m.group(3)), "bytes"),
                Figure("profile", "non_torch_bytes", _gib(m.group(4)), "bytes"),
                Figure("weights", "weights_bytes", _gib(m.group(5)), "bytes")]
    return out


@rule("vllm", r"can use total_gpu_memory \(([\d.]+)GiB\) x gpu_memory_utilization \(([\d.]+)\) = "
      r"([\d.]+)GiB")
def _budget(m: re.Match[str]) -> list[Figure]:
    return [Figure("profile", "total_gpu_bytes", _gib(m.group(1)), "bytes"),
            Figure("profile", "gpu_memory_utilization", _num(m.group(2)), "ratio"),
            Figure("profile", "budget_bytes", _gib(m.group(3)), "bytes")]


@rule("vllm", r"model weights take ([\d.]+)GiB; non_torch_memory takes ([\d.]+)GiB; PyTorch "
      r"activation peak memory takes ([\d.]+)GiB; the rest of the memory reserved for KV Cache "
      r"is ([\d.]+)GiB")
def _v0_terms(m: re.Match[str]) -> list[Figure]:
    return [Figure("weights", "weights_bytes", _gib(m.group(1)), "bytes"),
            Figure("profile", "non_torch_bytes", _gib(m.group(2)), "bytes"),
            Figure("profile", "activation_peak_bytes", _gib(m.group(3)), "bytes"),
            Figure("kv_cache", "available_kv_bytes", _gib(m.group(4)), "bytes")]


@rule("vllm", r"Available KV cache memory: ([\d.]+) GiB")
def _available(m: re.Match[str]) -> list[Figure]:
    return [Figure("kv_cache", "available_kv_bytes", _gib(m.group(1)), "bytes")]


# "GPU KV cache size" on GPUs (and on CPU builds up to about 0.29), "CPU KV cache size" on
# CPU builds since; newer builds print the concurrency on the same line.
@rule("vllm", r"(?:GPU|CPU|XPU|HPU|TPU|NPU) KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for "
      r"([\d,]+) tokens per request: ([\d.]+)x)?")
def _kv_tokens(m: re.Match[str]) -> list[Figure]:
    out = [Figure("kv_cache", "kv_tokens", _num(m.group(1)), "tokens")]
    if m.group(2):
        out += [Figure("kv_cache", "max_concurrency_tokens", _num(m.group(2)), "tokens"),
                Figure("kv_cache", "max_concurrency", _num(m.group(3)), "ratio")]
    return out


# vLLM's CPU worker: the KV pool is VLLM_CPU_KVCACHE_SPACE ("Explicitly set") or what is
# left of the node's memory after the profiled non-KV use ("Auto set"), not a GPU budget.
@rule("vllm", r"(Explicitly|Auto) set \(([\d.]+)/([\d.]+)\) GiB for KV cache on node (\d+)"
      r"(?:, with ([\d.]+) GiB requested memory for the worker\. ([\d.]+) GiB memory was consumed "
      r"by non-kv usages)?")
def _cpu_kv_space(m: re.Match[str]) -> list[Figure]:
    out = [Figure("kv_cache", "available_kv_bytes", _gib(m.group(2)), "bytes"),
           Figure("kv_cache", "node_memory_bytes", _gib(m.group(3)), "bytes"),
           Figure("kv_cache", "kv_space_explicit", 1.0 if m.group(1) == "Explicitly" else 0.0, None)]
    if m.group(5):
        out += [Figure("profile", "worker_memory_bytes", _gib(m.group(5)), "bytes"),
                Figure("profile", "non_kv_bytes", _gib(m.group(6)), "bytes")]
    return out


@rule("vllm", r"^(?:# )?GPU blocks: (\d+)(?:, # CPU blocks: (\d+))?")
def _blocks(m: re.Match[str]) -> list[Figure]:
    out = [Figure("kv_cache", "num_gpu_blocks", _num(m.group(1)), "blocks")]
    if m.group(2):
        out.append(Figure("kv_cache", "num_cpu_blocks", _num(m.group(2)), "blocks"))
    return out


@rule("vllm", r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
def _override(m: re.Match[str]) -> list[Figure]:
    return [Figure("kv_cache", "num_gpu_blocks", _num(m.group(2)), "blocks"),
            Figure("kv_cache", "num_gpu_blocks_override", _num(m.group(2)), "blocks")]


@rule("vllm", r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
def _concurrency(m: re.Match[str]) -> list[Figure]:
    return [Figure("kv_cache", "max_concurrency_tokens", _num(m.group(1)), "tokens"),
            Figure("kv_cache", "max_concurrency", _num(m.group(2)), "ratio")]


@rule("vllm", r"Estimated CUDA graph memory: ([\d.]+) GiB")
def _graph_estimate(m: re.Match[str]) -> list[Figure]:
    return [Figure("cuda_graphs", "graph_estimate_bytes", _gib(m.group(1)), "bytes")]


@rule("vllm", r"Graph capturing finished in ([\d.]+) secs?, took ([\d.]+) GiB")
def _graphs(m: re.Match[str]) -> list[Figure]:
    return [Figure("cuda_graphs", "graph_seconds", _num(m.group(1)), "seconds"),
            Figure("cuda_graphs", "graph_bytes", _gib(m.group(2)), "bytes")]


@rule("vllm", r"Capturing (?:cudagraphs for decoding|the model for CUDA graphs|CUDA graphs? "
      r"(?:shapes|\())")
def _graph_start(m: re.Match[str]) -> list[Figure]:
    return [Figure("cuda_graphs", "capture_started", 1.0, None)]


# Readiness: what the server prints once the engine is built. vLLM builds the engine before
# it starts its HTTP server and SGLang waits for its scheduler, so uvicorn's own lines and the
# route list count as much as the engines' ready lines; a request answered or an engine stats
# line means the server was serving. Wordings: vLLM 0.6-0.10 "Starting vLLM API server [N] on",
# 0.11+ "Starting vLLM server on", SGLang "The server is fired up and ready to roll!", uvicorn
# "Started server process [N]" / "Application startup complete." / "Uvicorn running on".
@rule("vllm", r"Starting vLLM (?:API )?server\b")
def _api_server(m: re.Match[str]) -> list[Figure]:
    return [Figure("ready", "api_server_starting", 1.0, None)]


@rule("vllm", r"^Available routes are:|^Route: /\S*, Methods?: ")
def _routes(m: re.Match[str]) -> list[Figure]:
    return [Figure("ready", "routes_listed", 1.0, None)]


@rule("any", r"^Started server process \[\d+\]|^Uvicorn running on ")
def _uvicorn(m: re.Match[str]) -> list[Figure]:
    return [Figure("ready", "uvicorn_started", 1.0, None)]


@rule("any", r"Application startup complete|^serving on http")
@rule("sglang", r"The server is fired up and ready to roll")
def _ready(m: re.Match[str]) -> list[Figure]:
    return [Figure("ready", "ready", 1.0, None)]


@rule("any", r"\"(?:GET|POST|PUT|DELETE|HEAD) /\S* HTTP/[\d.]+\" \d{3}|Avg prompt throughput: |"
      r"^(?:Prefill|Decode) batch[.,] ")
def _serving(m: re.Match[str]) -> list[Figure]:
    return [Figure("ready", "serving", 1.0, None)]


# ---- SGLang ------------------------------------------------------------------------------
@rule("sglang", r"Load weight end\. type=\w+, dtype=[\w.]+, avail mem=([\d.]+) GB, mem usage="
      r"([\d.]+) GB")
def _sg_weights(m: re.Match[str]) -> list[Figure]:
    return [Figure("weights", "weights_bytes", _gib(m.group(2)), "bytes"),
            Figure("weights", "free_after_bytes", _gib(m.group(1)), "bytes")]


@rule("sglang", r"KV Cache is allocated\. (?:dtype: [\w.]+, )?#tokens: (\d+), K size: ([\d.]+) GB, "
      r"V size: ([\d.]+) GB")
def _sg_kv(m: re.Match[str]) -> list[Figure]:
    return [Figure("kv_cache", "kv_tokens", _num(m.group(1)), "tokens"),
            Figure("kv_cache", "available_kv_bytes", _gib(m.group(2)) + _gib(m.group(3)), "bytes")]


@rule("sglang", r"Memory pool end\. avail mem=([\d.]+) GB")
def _sg_pool_end(m: re.Match[str]) -> list[Figure]:
    return [Figure("kv_cache", "free_after_bytes", _gib(m.group(1)), "bytes")]


@rule("sglang", r"Capture cuda graph begin\..*avail mem=([\d.]+) GB")
def _sg_graph_begin(m: re.Match[str]) -> list[Figure]:
    return [Figure("cuda_graphs", "capture_started", 1.0, None),
            Figure("cuda_graphs", "free_before_bytes", _gib(m.group(1)), "bytes")]


@rule("sglang", r"Capture cuda graph bs \[([\d, ]*)\]")
def _sg_graph_sizes(m: re.Match[str]) -> list[Figure]:
    return [Figure("cuda_graphs", "graph_batch_sizes", float(len(m.group(1).split(","))), None)]


@rule("sglang", r"Capture cuda graph end\. Time elapsed: ([\d.]+) s\. mem usage=([\d.]+) GB")
def _sg_graph_end(m: re.Match[str]) -> list[Figure]:
    return [Figure("cuda_graphs", "graph_seconds", _num(m.group(1)), "seconds"),
            Figure("cuda_graphs", "graph_bytes", _gib(m.group(2)), "bytes")]


@rule("sglang", r"max_total_num_tokens=(\d+),.*?max_running_requests=(\d+), context_len=(\d+)")
def _sg_limits(m: re.Match[str]) -> list[Figure]:
    return [Figure("kv_cache", "kv_tokens", _num(m.group(1)), "tokens"),
            Figure("kv_cache", "max_running_requests", _num(m.group(2)), None)]


@rule("sglang", r"max_total_tokens=\d+ is larger than the profiled value (-?\d+)")
def _sg_profiled(m: re.Match[str]) -> list[Figure]:
    return [Figure("kv_cache", "kv_tokens", _num(m.group(1)), "tokens")]


def figures(message: str) -> tuple[str | None, list[Figure]]:
    """(engine the wording belongs to, figures) for one message; (None, []) if it says none."""
    for engine, pattern, fn in _RULES:
        m = pattern.search(message)
        if m:
            return engine, fn(m)
    return None, []


# ---- failures ----------------------------------------------------------------------------
_KV_ERROR = re.compile(
    r"To serve at least one request with the models?'s max seq len \((\d+)\), \(([\d.]+) GiB KV "
    r"cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)"
    r"(?:\. Based on the available memory, the estimated maximum model length is (\d+))?")
_KV_ERROR_V0 = re.compile(r"The model's max seq len \((\d+)\) is larger than the maximum number "
                          r"of tokens that can be stored in KV cache \((\d+)\)")
_NO_BLOCKS = re.compile(r"No available memory for the cache blocks")
_SG_NOT_ENOUGH = re.compile(r"Not enough memory(?: to allocate KV cache)?\. Please try to "
                            r"increase --mem-fraction-static|Not enough memory to allocate KV cache")
_OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory")


def failure(message: str) -> Failure | None:
    if m := _KV_ERROR.search(message):
        figs = [Figure("kv_cache", "max_model_len", _num(m.group(1)), "tokens"),
                Figure("kv_cache", "needed_kv_bytes", _gib(m.group(2)), "bytes"),
                Figure("kv_cache", "available_kv_bytes", _gib(m.group(3)), "bytes")]
        if m.group(4):
            figs.append(Figure("kv_cache", "estimated_max_model_len", _num(m.group(4)), "tokens"))
        return Failure("kv_cache_too_small", "kv_cache", tuple(figs))
    if m := _KV_ERROR_V0.search(message):
        return Failure("kv_cache_too_small", "kv_cache",
                       (Figure("kv_cache", "max_model_len", _num(m.group(1)), "tokens"),
                        Figure("kv_cache", "kv_tokens", _num(m.group(2)), "tokens")))
    if _NO_BLOCKS.search(message):
        return Failure("no_kv_memory", "kv_cache")
    if _SG_NOT_ENOUGH.search(message):
        return Failure("not_enough_memory", "kv_cache")
    if _OOM.search(message):
        return Failure("oom", None)
    return None


# Functions in a traceback that place an out-of-memory error in a phase.
_TRACE_PHASES = (
    ("cuda_graphs", re.compile(r"capture_model|cuda_graph|cudagraph|torch\.cuda\.graph|capture_end"
                               r"|CudaGraphRunner|graph_capture")),
    ("kv_cache", re.compile(r"_allocate_kv_cache|initialize_kv_cache|init_memory_pool|"
                            r"allocate_kv_cache|_init_cache")),
    ("profile", re.compile(r"profile_run|determine_available_memory|determine_num_available_blocks|"
                           r"_dummy_run|profile_max_num_token")),
    ("weights", re.compile(r"load_model|load_weights|weight_loader|model_loader")),
)


def traceback_phase(message: str) -> str | None:
    for phase, pattern in _TRACE_PHASES:
        if pattern.search(message):
            return phase
    return None


_VERSION = (re.compile(r"(?:V1 )?LLM engine \(v([^)]+)\)"), re.compile(r"vLLM API server version ([\w.+-]+)"),
            re.compile(r"sglang(?:==| version:? )v?([\d][\w.+-]*)", re.I))
_CONFIG_PAIR = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,\s)}]+)")
SETTING_KEYS = {"model": "model", "model_path": "model", "max_seq_len": "max_model_len",
                "max_model_len": "max_model_len", "context_length": "max_model_len",
                "tensor_parallel_size": "tensor_parallel_size", "tp_size": "tensor_parallel_size",
                "gpu_memory_utilization": "gpu_memory_utilization",
                "mem_fraction_static": "mem_fraction_static", "dtype": "dtype",
                "kv_cache_dtype": "kv_cache_dtype", "quantization": "quantization",
                "enforce_eager": "enforce_eager", "block_size": "block_size", "gpu": "gpu",
                "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
                "device_config": "device"}


def version(message: str) -> str | None:
    for pattern in _VERSION:
        if m := pattern.search(message):
            return m.group(1)
    return None


def settings(message: str) -> dict[str, str]:
    """Settings from a config dump line (vLLM's "with config:", "non-default args: {...}",
    SGLang's "server_args=ServerArgs(...)")."""
    if not ("with config:" in message or "non-default args" in message or "ServerArgs(" in message):
        return {}
    text = re.sub(r"'(\w+)': ", r"\1=", message)  # the args dict: 'key': value -> key=value
    out: dict[str, str] = {}
    for key, value in _CONFIG_PAIR.findall(text):
        name = SETTING_KEYS.get(key)
        if name and name not in out:
            out[name] = value.strip("'\"")
    return out
