"""Pricing a configuration change for a workload with infbench's own serving arithmetic.

Where the model and GPU are known (`infbench.specs`), a change is priced, not guessed:

- KV capacity (`kv_cache_dtype`, `gpu_memory_utilization`, `block_size`, `max_model_len`):
  `plan_memory` on each side, then how many of the workload's sequences each pool holds at
  once against the concurrency the workload keeps in flight.
- Batch cap (`max_num_seqs`): decode throughput at each side's batch, from `step_time`.
- Token budget (`max_num_batched_tokens`): the decode step that carries a prefill chunk
  against a decode-only step (the ITL spike), and the steps a prompt takes to prefill.
- CUDA graphs (`cudagraph_max_capture_size`, `cudagraph_capture_sizes`): a decode batch
  above the largest captured size runs eagerly and pays the launch overhead; one between
  sizes is padded up to the next.
- Async scheduling: the host's per-step work hidden behind the device step, or added to it.
- Stream interval: tokens per streamed event multiply the inter-token gap a client sees.

The launch and host overheads are the reference engine's model of them (its sim executor
uses the same numbers), stated here so a reader can check them: eager decode pays
`EAGER_KERNELS_PER_LAYER` launches of `LAUNCH_US` per layer (a piecewise graph leaves
`PIECEWISE_EAGER_KERNELS_PER_LAYER` of them, attention, outside); host work is
`HOST_MS_PER_STEP` per step.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

from infbench.specs import SpecError, get_gpu, get_model
from infbench.specs.gpus import KERNELS_PER_LAYER
from infbench.specs.memory import plan_memory
from infbench.specs.roofline import step_time

EAGER_KERNELS_PER_LAYER = KERNELS_PER_LAYER
PIECEWISE_EAGER_KERNELS_PER_LAYER = 2  # attention's kernels, launched between graph pieces
LAUNCH_US = 4.0
HOST_MS_PER_STEP = 0.5


@dataclass(frozen=True)
class Workload:
    concurrency: int = 32
    input_tokens: int = 1024
    output_tokens: int = 256
    shared_prefix: bool = False
    streaming: bool = True
    model: str | None = None
    gpu: str | None = None

    def describe(self) -> str:
        extra = (", shared prefixes" if self.shared_prefix else "") + (", streaming" if self.streaming else "")
        return (f"{self.concurrency} in flight, {self.input_tokens} in / {self.output_tokens} out tokens"
                f"{extra}")


@dataclass(frozen=True)
class Price:
    magnitude: float  # relative change of the metric it moves most (0.25 = 25%)
    reason: str
    worse: str | None  # "a" or "b": the side the workload does worse on; None: neither
    numbers: dict[str, Any]


@dataclass(frozen=True)
class Hardware:
    model: Any
    gpu: Any
    tp: int


def _fmt(value: Any, fallback: str) -> str:
    v = str(value or "auto").lower()
    return {"auto": fallback, "bfloat16": "bf16", "float16": "fp16", "fp8_e4m3": "fp8",
            "fp8_e5m2": "fp8"}.get(v, v)


def hardware(values: dict[str, Any], wl: Workload) -> Hardware | None:
    name = wl.model or values.get("model") or values.get("served_model_name")
    gpu_name = wl.gpu or values.get("gpu") or next(iter(values.get("gpu_models") or []), None)
    if not name or not gpu_name:
        return None
    try:
        return Hardware(get_model(str(name)), get_gpu(str(gpu_name)),
                        int(values.get("tensor_parallel_size") or 1))
    except (SpecError, ValueError, TypeError):
        return None


def _decode_s(hw: Hardware, batch: int, context: int, kv: str, weights: str) -> float:
    if batch <= 0:
        return 0.0
    return step_time(hw.model, hw.gpu, tp=hw.tp, weight_format=weights, kv_format=kv,
                     decode_contexts=[context] * batch).seconds


def _formats(values: dict[str, Any]) -> tuple[str, str]:
    weights = _fmt(values.get("dtype"), "bf16")
    if weights not in ("bf16", "fp16", "fp8"):
        weights = "bf16"
    return weights, _fmt(values.get("kv_cache_dtype"), weights)


def _batch(values: dict[str, Any], wl: Workload) -> int:
    cap = values.get("max_num_seqs")
    return min(wl.concurrency, cap) if isinstance(cap, int) and cap > 0 else wl.concurrency


def price_kv(hw: Hardware, a: dict[str, Any], b: dict[str, Any], wl: Workload) -> Price | None:
    context = wl.input_tokens + wl.output_tokens
    caps, steps = [], []
    for v in (a, b):
        weights, kv = _formats(v)
        try:
            plan = plan_memory(hw.model, hw.gpu, tp=hw.tp,
                               gpu_memory_utilization=float(v.get("gpu_memory_utilization") or 0.9),
                               max_model_len=max(context, int(v.get("max_model_len") or context)),
                               block_size=int(v.get("block_size") or 16), weight_format=weights,
                               kv_format=kv, max_num_seqs=int(v.get("max_num_seqs") or 256),
                               max_num_batched_tokens=int(v.get("max_num_batched_tokens") or 8192),
                               suggest_fixes=False)
        except (SpecError, ValueError, TypeError):
            return None
        caps.append(plan.max_concurrency(context) if plan.fits else 0)
        steps.append(_decode_s(hw, _batch(v, wl), context // 2 + wl.input_tokens // 2, kv, weights))
    short = [max(0, wl.concurrency - c) for c in caps]
    queue = (short[1] - short[0]) / wl.concurrency
    step_change = steps[1] / steps[0] - 1 if steps[0] else 0.0
    magnitude = abs(queue) + abs(step_change)
    worse = None if magnitude < 0.02 else ("b" if queue + step_change > 0 else "a")
    holds = f"holds {caps[0]} -> {caps[1]} sequences of {context} tokens"
    if max(short) == 0:
        fits = f"; both hold the {wl.concurrency} the workload keeps in flight"
    else:
        fits = f"; the workload keeps {wl.concurrency} in flight, so {max(short)} wait or are preempted"
    step = f"; decode step {steps[0] * 1e3:.1f} -> {steps[1] * 1e3:.1f} ms" if abs(step_change) >= 0.01 else ""
    return Price(magnitude, f"KV pool {holds}{fits}{step}", worse,
                 {"kv_sequences": caps, "decode_step_ms": [s * 1e3 for s in steps]})


def price_batch(hw: Hardware, a: dict[str, Any], b: dict[str, Any], wl: Workload) -> Price:
    context = wl.input_tokens + wl.output_tokens // 2
    batches = [_batch(v, wl) for v in (a, b)]
    tput = []
    for v, n in zip((a, b), batches, strict=True):
        weights, kv = _formats(v)
        s = _decode_s(hw, n, context, kv, weights)
        tput.append(n / s if s else 0.0)
    if batches[0] == batches[1]:
        return Price(0.0, f"both run all {wl.concurrency} of the workload's sequences at once", None,
                     {"batch": batches})
    change = tput[1] / tput[0] - 1
    return Price(abs(change), f"decode batch {batches[0]} -> {batches[1]} of the {wl.concurrency} in "
                 f"flight: {tput[0]:,.0f} -> {tput[1]:,.0f} output tok/s ({change:+.0%}); the rest queue",
                 "b" if change < 0 else "a", {"batch": batches, "tok_s": tput})


def price_token_budget(hw: Hardware, a: dict[str, Any], b: dict[str, Any], wl: Workload) -> Price | None:
    budgets: list[Any] = [a.get("max_num_batched_tokens"), b.get("max_num_batched_tokens")]
    if not all(isinstance(x, int) and x > 0 for x in budgets):
        return None
    weights, kv = _formats(a)
    n = max(1, _batch(a, wl) - 1)
    decode = [wl.input_tokens + wl.output_tokens // 2] * n
    base = step_time(hw.model, hw.gpu, tp=hw.tp, weight_format=weights, kv_format=kv,
                     decode_contexts=decode).seconds
    spikes, prefill_steps, prefill_s = [], [], []
    for t in budgets:
        room = max(1, t - n)  # the running decodes take one token each of the budget
        chunks = [min(room, wl.input_tokens - done) for done in range(0, wl.input_tokens, room)]
        times = [step_time(hw.model, hw.gpu, tp=hw.tp, weight_format=weights, kv_format=kv,
                           prefill_chunks=[(c, done)], decode_contexts=decode).seconds
                 for c, done in zip(chunks, range(0, wl.input_tokens, room), strict=True)]
        spikes.append(times[0])
        prefill_steps.append(len(chunks))
        prefill_s.append(sum(times))
    itl = spikes[1] / spikes[0] - 1
    ttft = prefill_s[1] / prefill_s[0] - 1
    magnitude = abs(itl) + abs(ttft)
    worse = None if magnitude < 0.02 else ("b" if itl + ttft > 0 else "a")
    return Price(magnitude, f"a decode step carrying a prefill chunk takes {spikes[0] * 1e3:.1f} -> "
                 f"{spikes[1] * 1e3:.1f} ms (decode alone {base * 1e3:.1f} ms: ITL spikes {itl:+.0%}); "
                 f"a {wl.input_tokens}-token prompt prefills in {prefill_steps[0]} -> {prefill_steps[1]} "
                 f"steps, {prefill_s[0] * 1e3:.0f} -> {prefill_s[1] * 1e3:.0f} ms ({ttft:+.0%} TTFT)",
                 worse, {"chunk_step_ms": [s * 1e3 for s in spikes], "prefill_steps": prefill_steps,
                         "prefill_ms": [s * 1e3 for s in prefill_s]})


def eager_overhead_s(hw: Hardware) -> float:
    return hw.model.num_layers * EAGER_KERNELS_PER_LAYER * LAUNCH_US * 1e-6


def _graph_cost(hw: Hardware, v: dict[str, Any], wl: Workload) -> tuple[float, str]:
    n = _batch(v, wl)
    weights, kv = _formats(v)
    context = wl.input_tokens + wl.output_tokens // 2
    if v.get("enforce_eager") is True or v.get("cudagraph_mode") == "NONE":
        return _decode_s(hw, n, context, kv, weights) + eager_overhead_s(hw), "eager (no graphs)"
    sizes = v.get("cudagraph_capture_sizes")
    cap = v.get("cudagraph_max_capture_size")
    sizes = sorted(sizes) if isinstance(sizes, list) and sizes else None
    largest = sizes[-1] if sizes else (cap if isinstance(cap, int) and cap > 0 else None)
    if largest is not None and n > largest:
        return _decode_s(hw, n, context, kv, weights) + eager_overhead_s(hw), f"eager (batch {n} > {largest})"
    padded = sizes[bisect.bisect_left(sizes, n)] if sizes else n
    mode = v.get("cudagraph_mode")
    if mode == "PIECEWISE":
        # Attention stays outside piecewise graphs: its kernels launch eagerly every layer.
        extra = hw.model.num_layers * PIECEWISE_EAGER_KERNELS_PER_LAYER * LAUNCH_US * 1e-6
        return _decode_s(hw, padded, context, kv, weights) + extra, f"piecewise graph of {padded}"
    return _decode_s(hw, padded, context, kv, weights), f"graph of {padded}"


def price_graphs(hw: Hardware, a: dict[str, Any], b: dict[str, Any], wl: Workload) -> Price:
    (sa, wa), (sb, wb) = _graph_cost(hw, a, wl), _graph_cost(hw, b, wl)
    change = sb / sa - 1 if sa else 0.0
    worse = None if abs(change) < 0.01 else ("b" if change > 0 else "a")
    return Price(abs(change), f"decode step at batch {_batch(b, wl)}: {wa} {sa * 1e3:.2f} ms -> {wb} "
                 f"{sb * 1e3:.2f} ms ({change:+.0%} TPOT)", worse, {"step_ms": [sa * 1e3, sb * 1e3]})


def price_host(hw: Hardware, a: dict[str, Any], b: dict[str, Any], wl: Workload) -> Price:
    weights, kv = _formats(a)
    device = _decode_s(hw, _batch(a, wl), wl.input_tokens + wl.output_tokens // 2, kv, weights)
    host = HOST_MS_PER_STEP * 1e-3
    steps = [max(device, host) if v.get("async_scheduling") is True else device + host for v in (a, b)]
    change = steps[1] / steps[0] - 1
    return Price(abs(change), f"host work per step ({HOST_MS_PER_STEP} ms) "
                 f"{'hidden behind' if b.get('async_scheduling') is True else 'added to'} a "
                 f"{device * 1e3:.1f} ms decode step: {change:+.1%} TPOT",
                 None if abs(change) < 0.005 else ("b" if change > 0 else "a"),
                 {"step_ms": [s * 1e3 for s in steps]})


def price_stream(a: dict[str, Any], b: dict[str, Any], wl: Workload) -> Price | None:
    ia, ib = a.get("stream_interval") or 1, b.get("stream_interval") or 1
    if not (isinstance(ia, int) and isinstance(ib, int)) or ia <= 0 or ib <= 0:
        return None
    if not wl.streaming:
        return Price(0.0, f"{ia} -> {ib} tokens per event; the workload does not stream", None, {})
    change = ib / ia - 1
    return Price(min(abs(math.log(ib / ia)), 2.0), f"{ia} -> {ib} tokens per streamed event: a client's "
                 f"inter-token gap is {ib / ia:.3g}x (bursts of {ib}); throughput barely moves",
                 None if change == 0 else ("b" if change > 0 else "a"), {"tokens_per_event": [ia, ib]})


def price(kind: str, a: dict[str, Any], b: dict[str, Any], wl: Workload) -> Price | None:
    """The change priced by `kind` (a knob's `priced` in knobs.toml), or None if it cannot be."""
    if kind == "stream":
        return price_stream(a, b, wl)
    hw = hardware(b, wl) or hardware(a, wl)
    if hw is None:
        return None
    try:
        if kind == "kv":
            return price_kv(hw, a, b, wl)
        if kind == "batch":
            return price_batch(hw, a, b, wl)
        if kind == "token_budget":
            return price_token_budget(hw, a, b, wl)
        if kind == "graphs":
            return price_graphs(hw, a, b, wl)
        if kind == "host":
            return price_host(hw, a, b, wl)
    except (SpecError, ValueError, TypeError, ZeroDivisionError):
        return None
    return None
