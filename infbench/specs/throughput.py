"""Roofline analysis around `step_time`: decode and prefill, TTFT, the step-time line,
the throughput curve and its knee, and the three ceilings on concurrency."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from infbench.specs.errors import SpecError
from infbench.specs.formats import FormatSpec
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION, GpuSpec
from infbench.specs.memory import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, plan_memory
from infbench.specs.models import ModelSpec
from infbench.specs.roofline import CostModel, StepBreakdown, cost_model, step_time_from_cost

_SEARCH_LIMIT = 1 << 22  # batches and prompt lengths beyond this are "never"


@dataclass(frozen=True)
class LineFit:
    """step_s ~ intercept_s + slope_s * batch, least squares over the sampled batches."""

    intercept_s: float
    slope_s: float
    batches: tuple[int, ...]
    max_relative_error: float

    @property
    def knee_batch(self) -> float:
        """Batch where the per-sequence cost equals the fixed cost: throughput is half its
        limit 1/slope, and each further doubling buys at most a third more."""
        return self.intercept_s / self.slope_s if self.slope_s > 0 else math.inf

    @property
    def throughput_limit(self) -> float:
        return 1 / self.slope_s if self.slope_s > 0 else math.inf


@dataclass(frozen=True)
class CurvePoint:
    batch: int
    step_s: float
    tokens_per_s: float
    tokens_per_s_per_user: float
    bound: str


@dataclass(frozen=True)
class Ceilings:
    kv_capacity: int  # sequences of `context` tokens the KV pool holds
    compute_ridge: int | None  # smallest batch whose decode step is compute-bound; None: never
    max_num_seqs: int
    lowest: str  # which of the three binds first

    @property
    def limit(self) -> int:
        return min(
            x for x in (self.kv_capacity, self.compute_ridge, self.max_num_seqs) if x is not None
        )


@dataclass(frozen=True)
class RooflineReport:
    model: str
    gpu: str
    tp: int
    weight_format: str
    kv_format: str
    bandwidth_fraction: float
    flops_fraction: float
    batch: int
    context: int
    decode: StepBreakdown
    decode_tokens_per_s: float
    decode_tokens_per_s_per_user: float
    prompt_tokens: int
    prefill: StepBreakdown  # the whole prompt as one step
    compute_bound_prompt_tokens: int | None
    chunk_tokens: int
    ttft_s: float  # chunked prefill of the prompt, alone on the GPU, no queueing
    ttft_chunks: int
    line: LineFit
    curve: tuple[CurvePoint, ...]
    ceilings: Ceilings


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{name} must be a positive integer, got {value!r}")
    return value


def _decode(cm: CostModel, batch: int, context: int, bw: float, fl: float) -> StepBreakdown:
    return step_time_from_cost(cm, (), [context] * batch, bw, fl)


def _smallest(predicate: Callable[[int], bool], limit: int = _SEARCH_LIMIT) -> int | None:
    """Smallest n in [1, limit] with predicate(n) true, for a predicate that stays true."""
    if not predicate(limit):
        return None
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if predicate(mid) else (mid + 1, hi)
    return lo


def compute_bound_prompt_tokens(cm: CostModel, bw: float, fl: float) -> int | None:
    """Shortest prompt whose one-step prefill is compute-bound (None: never)."""

    def compute_bound(p: int) -> bool:
        s = step_time_from_cost(cm, [(p, 0)], (), bw, fl)
        return s.compute_s >= s.memory_s

    return _smallest(compute_bound)


def compute_ridge_batch(cm: CostModel, context: int, bw: float, fl: float) -> int | None:
    """Smallest decode batch at `context` whose step is compute-bound (None: never)."""
    # KV reads grow with the batch as fast as FLOPs do, so at long contexts decode never
    # turns compute-bound; test the asymptote before searching.
    big = _decode(cm, _SEARCH_LIMIT, context, bw, fl)
    if big.compute_s < big.memory_s:
        return None
    return _smallest(
        lambda b: (lambda s: s.compute_s >= s.memory_s)(_decode(cm, b, context, bw, fl))
    )


def ttft(cm: CostModel, prompt: int, chunk: int, bw: float, fl: float) -> tuple[float, int]:
    """Chunked prefill of one prompt alone on the GPU: sum of its chunks' step times."""
    total, done, chunks = 0.0, 0, 0
    while done < prompt:
        n = min(chunk, prompt - done)
        total += step_time_from_cost(cm, [(n, done)], (), bw, fl).seconds
        done += n
        chunks += 1
    return total, chunks


def fit_line(cm: CostModel, context: int, max_batch: int, bw: float, fl: float) -> LineFit:
    batches = sorted({1, 2, *(1 << i for i in range(2, 20) if (1 << i) < max_batch), max_batch})
    times = [_decode(cm, b, context, bw, fl).seconds for b in batches]
    n = len(batches)
    if n == 1:
        return LineFit(times[0], 0.0, tuple(batches), 0.0)
    mx, my = sum(batches) / n, sum(times) / n
    sxx = sum((b - mx) ** 2 for b in batches)
    slope = sum((b - mx) * (t - my) for b, t in zip(batches, times, strict=True)) / sxx
    intercept = my - slope * mx
    err = max(abs(intercept + slope * b - t) / t for b, t in zip(batches, times, strict=True))
    return LineFit(intercept, slope, tuple(batches), err)


def curve(
    cm: CostModel, context: int, max_batch: int, bw: float, fl: float
) -> tuple[CurvePoint, ...]:
    points = []
    for b in sorted({*(1 << i for i in range(0, 20) if (1 << i) < max_batch), max_batch}):
        s = _decode(cm, b, context, bw, fl)
        points.append(CurvePoint(b, s.seconds, b / s.seconds, 1 / s.seconds, s.bound))
    return tuple(points)


def roofline_report(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int = 1,
    weight_format: str | FormatSpec = "bf16",
    kv_format: str | FormatSpec = "bf16",
    batch: int = 1,
    context: int = 2048,
    prompt_tokens: int = 2048,
    chunk_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    gpu_memory_utilization: float = 0.9,
    bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION,
    flops_fraction: float = DEFAULT_FLOPS_FRACTION,
    block_size: int = 16,
) -> RooflineReport:
    """`chunk_tokens` is vLLM's max_num_batched_tokens: the prefill chunk, and the profile
    run that sizes the KV pool (with `gpu_memory_utilization` and `block_size`)."""
    for name, value in (
        ("batch", batch),
        ("context", context),
        ("prompt_tokens", prompt_tokens),
        ("chunk_tokens", chunk_tokens),
        ("max_num_seqs", max_num_seqs),
    ):
        _positive(name, value)
    for name, frac in (
        ("bandwidth_fraction", bandwidth_fraction),
        ("flops_fraction", flops_fraction),
    ):
        if not 0 < frac <= 1:
            raise SpecError(f"{name} must be in (0, 1], got {frac!r}")
    bw, fl = bandwidth_fraction, flops_fraction
    cm = cost_model(model, gpu, tp, weight_format, kv_format)
    decode = _decode(cm, batch, context, bw, fl)
    prefill = step_time_from_cost(cm, [(prompt_tokens, 0)], (), bw, fl)
    ttft_s, chunks = ttft(cm, prompt_tokens, chunk_tokens, bw, fl)
    plan = plan_memory(
        model,
        gpu,
        tp=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=context,
        block_size=block_size,
        weight_format=weight_format,
        kv_format=kv_format,
        max_num_batched_tokens=chunk_tokens,
        max_num_seqs=max_num_seqs,
        suggest_fixes=False,
    )
    kv_cap = plan.max_concurrency(context)
    ridge = compute_ridge_batch(cm, context, bw, fl)
    named = {"KV capacity": kv_cap, "max_num_seqs": max_num_seqs}
    if ridge is not None:
        named["compute ridge"] = ridge
    lowest = min(named, key=lambda k: named[k])
    curve_max = max(2, min(x for x in named.values() if x > 0) if any(named.values()) else 2)
    return RooflineReport(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        weight_format=str(weight_format if isinstance(weight_format, str) else weight_format.name),
        kv_format=str(kv_format if isinstance(kv_format, str) else kv_format.name),
        bandwidth_fraction=bw,
        flops_fraction=fl,
        batch=batch,
        context=context,
        decode=decode,
        decode_tokens_per_s=batch / decode.seconds,
        decode_tokens_per_s_per_user=1 / decode.seconds,
        prompt_tokens=prompt_tokens,
        prefill=prefill,
        compute_bound_prompt_tokens=compute_bound_prompt_tokens(cm, bw, fl),
        chunk_tokens=chunk_tokens,
        ttft_s=ttft_s,
        ttft_chunks=chunks,
        line=fit_line(cm, context, curve_max, bw, fl),
        curve=curve(cm, context, curve_max, bw, fl),
        ceilings=Ceilings(kv_cap, ridge, max_num_seqs, lowest),
    )
