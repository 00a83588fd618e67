"""Prometheus text exposition with vLLM's metric names and types.

Gauges and counters are read from `Engine.stats()` at scrape time, so they can never drift
from the engine's own bookkeeping. Request-level histograms are observed by the server as
outputs arrive (vLLM also measures them in its front end). Everything here runs on the
server's event loop thread, so no locking is needed.

Counters are exposed as `prometheus_client` (and therefore vLLM) writes them in text format
0.0.4: the `# HELP` and `# TYPE` lines and the sample all name `<family>_total`. A `# TYPE`
line without the suffix over a `_total` sample leaves the sample untyped to every parser
(Prometheus, promtool, the official Python parser), and counters then lose `rate()` hints.
"""

from __future__ import annotations

import bisect
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

# Names outside vLLM's own families carry no colon (Prometheus reserves colons for recording
# rules; vLLM's names are the one exception kept for compatibility).
# Bucket edges as vLLM's v1 front end declares them, so dashboards built for vLLM quantise the
# same way against this engine.
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EngineStatsLike(Protocol):
    """The part of `EngineStats` the exposition reads."""

    num_running: int
    num_waiting: int
    kv_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value)}.0" if isinstance(value, float) else str(int(value))
    return repr(float(value))


def escape_label_value(value: str) -> str:
    """Escape a label value per the text format (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs)
    return "{" + inner + "}"


def _family(name: str, kind: str, doc: str, labels: list[tuple[str, str]], value: float) -> list[str]:
    """A gauge or counter family of one sample: HELP, TYPE and the sample (a counter's `name`
    already ends in `_total`, as prometheus_client writes all three lines)."""
    return [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", f"{name}{_labels(labels)} {_fmt(value)}"]


class Histogram:
    """A cumulative Prometheus histogram with fixed upper bounds."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        if list(buckets) != sorted(buckets) or len(set(buckets)) != len(buckets):
            raise ValueError(f"histogram {name}: buckets must be strictly increasing")
        self.name = name
        self.documentation = documentation
        self.bounds: tuple[float, ...] = tuple(buckets)
        # One slot per bound plus the +Inf overflow; cumulated only when rendered.
        self._counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        if math.isnan(value):
            return
        # bisect_left puts a value equal to a bound into that bound's bucket (le is inclusive).
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, labels: list[tuple[str, str]]) -> list[str]:
        lines = [f"# HELP {self.name} {self.documentation}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, n in zip((*self.bounds, math.inf), self._counts, strict=True):
            cumulative += n
            le = _labels([*labels, ("le", _fmt(float(bound)))])
            lines.append(f"{self.name}_bucket{le} {cumulative}")
        lines.append(f"{self.name}_sum{_labels(labels)} {_fmt(self.sum)}")
        lines.append(f"{self.name}_count{_labels(labels)} {self.count}")
        return lines


@dataclass(frozen=True)
class _Family:
    name: str
    kind: str  # "gauge" or "counter"
    documentation: str
    attribute: str


_ENGINE_FAMILIES: tuple[_Family, ...] = (
    _Family("vllm:num_requests_running", "gauge",
            "Number of requests in model execution batches.", "num_running"),
    _Family("vllm:num_requests_waiting", "gauge",
            "Number of requests waiting to be processed.", "num_waiting"),
    _Family("vllm:kv_cache_usage_perc", "gauge",
            "KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
    _Family("vllm:prefix_cache_queries", "counter",
            "Prefix cache queries, in terms of number of queried tokens.", "prefix_cache_queries"),
    _Family("vllm:prefix_cache_hits", "counter",
            "Prefix cache hits, in terms of number of cached tokens.", "prefix_cache_hits"),
    _Family("vllm:num_preemptions", "counter",
            "Cumulative number of preemptions from the engine.", "num_preemptions"),
    _Family("vllm:prompt_tokens", "counter",
            "Number of prefill tokens processed.", "prompt_tokens_total"),
    _Family("vllm:generation_tokens", "counter",
            "Number of generation tokens processed.", "generation_tokens_total"),
)


class RequestMetrics:
    """Request-level histograms and the finished-request counter, observed by the server."""

    def __init__(self) -> None:
        self.time_to_first_token = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.inter_token_latency = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e_request_latency = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS)
        self.request_queue_time = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.request_success: Counter[str] = Counter()

    def histograms(self) -> tuple[Histogram, ...]:
        return (self.time_to_first_token, self.inter_token_latency,
                self.e2e_request_latency, self.request_queue_time)


@dataclass(frozen=True)
class MemoryGauges:
    """Where the engine process's memory is, read at scrape time.

    `rss_bytes` is the process's resident set (prometheus_client's process collector, which
    vLLM serves, names it `process_resident_memory_bytes`); `num_gpu_blocks` and
    `block_size` are the KV pool as vLLM's `vllm:cache_config_info` labels carry it;
    `components` is the executor's own account (weights, kv_pool, other: fixed at start);
    `allocator` the torch allocator's counters where the executor has one (CUDA).
    """

    rss_bytes: int | None
    num_gpu_blocks: int
    block_size: int
    components: dict[str, int]
    allocator: dict[str, int]


def process_rss_bytes() -> int | None:
    """Resident memory of this process (Linux /proc), None where it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _memory_lines(mem: MemoryGauges, labels: list[tuple[str, str]]) -> list[str]:
    lines = []
    if mem.rss_bytes is not None:
        lines += ["# HELP process_resident_memory_bytes Resident memory size in bytes.",
                  "# TYPE process_resident_memory_bytes gauge",
                  f"process_resident_memory_bytes {_fmt(float(mem.rss_bytes))}"]
    info = _labels([*labels, ("block_size", str(mem.block_size)),
                    ("num_gpu_blocks", str(mem.num_gpu_blocks))])
    lines += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
              "# TYPE vllm:cache_config_info gauge", f"vllm:cache_config_info{info} 1.0",
              "# HELP reference_engine_memory_bytes Bytes the executor set aside at start, "
              "by component.", "# TYPE reference_engine_memory_bytes gauge"]
    for component, value in sorted(mem.components.items()):
        lines.append(f"reference_engine_memory_bytes"
                     f"{_labels([*labels, ('component', component)])} {_fmt(float(value))}")
    for key, value in sorted(mem.allocator.items()):
        lines += _family(f"reference_engine_torch_{key}_bytes", "gauge",
                         f"torch CUDA caching allocator: {key} bytes.", labels, float(value))
    return lines


def render(stats: EngineStatsLike, requests: RequestMetrics, model_name: str,
           memory: MemoryGauges | None = None) -> str:
    """The whole exposition for one scrape, ending with a newline as the format requires."""
    labels = [("model_name", model_name)]
    lines: list[str] = []
    if memory is not None:
        lines += _memory_lines(memory, labels)
    for fam in _ENGINE_FAMILIES:
        name = fam.name + ("_total" if fam.kind == "counter" else "")
        lines += _family(name, fam.kind, fam.documentation, labels, getattr(stats, fam.attribute))
    lines += ["# HELP vllm:request_success_total Count of successfully processed requests.",
              "# TYPE vllm:request_success_total counter"]
    for reason in ("stop", "length", "abort"):
        count = requests.request_success.get(reason, 0)
        lines.append(
            f"vllm:request_success_total{_labels([*labels, ('finished_reason', reason)])} {count}")
    for hist in requests.histograms():
        lines += hist.render(labels)
    return "\n".join(lines) + "\n"
