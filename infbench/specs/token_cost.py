"""What one sequence's part of a step costs on the roofline: the price of a tenant's work.

A step lasts max(memory, compute) over its whole batch (`roofline.step_time`), which does not
say whom the time was for. Each part is priced here at what it adds to the step:
- a prefill chunk by its compute: the FLOPs of its tokens (linear layers, attention over its
  context, the sampled token's head) over the compute roof. Prefill is compute-bound, and in a
  step that also decodes the weights are read for the decodes anyway;
- a decode token by memory: its share of the step's weight read (paid once per step, split
  evenly over the step's decoding sequences) plus the KV its attention reads.
Seconds at the achievable fractions the sim executor runs at (`infbench.specs.gpus`). The
bundled engine's fair-share policy charges tenants with these prices step by step, and
infbench's per-tenant accounting prices a run's requests with them, so both use one scale.
"""

from __future__ import annotations

from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION
from infbench.specs.kv import KvLayout
from infbench.specs.roofline import CostModel, step_time_from_cost


def prefill_seconds(cm: CostModel, tokens: int, before: int,
                    flops_fraction: float = DEFAULT_FLOPS_FRACTION) -> float:
    """Compute time of a prefill chunk of `tokens` tokens after `before` tokens of context
    (a whole prompt is one chunk with before = its cached tokens: chunking splits the same
    FLOPs over steps)."""
    if tokens <= 0:
        return 0.0
    return step_time_from_cost(cm, prefill_chunks=((tokens, before),),
                               flops_fraction=flops_fraction).compute_s


def step_weight_seconds(cm: CostModel, batch: int,
                        bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION) -> float:
    """One decode step's weight read at `batch` decoding sequences (for MoE: the experts that
    many tokens route to, in expectation)."""
    weights = cm.always_read_bytes + cm.moe_layers * cm.expected_experts(batch) * cm.expert_bytes
    return weights / (cm.bandwidth * bandwidth_fraction)


def kv_seconds(cm: CostModel, layer_tokens: float,
               bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION) -> float:
    """Time to read `layer_tokens` (tokens summed over layers) of KV."""
    return layer_tokens * cm.kv_bytes_per_layer_token / (cm.bandwidth * bandwidth_fraction)


def decode_seconds(cm: CostModel, context: int, batch: int,
                   bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION) -> float:
    """One decode token at `context` (the tokens it attends to, itself included) in a step
    decoding `batch` sequences: its share of the weight read plus its own KV read."""
    batch = max(1, batch)
    return (step_weight_seconds(cm, batch, bandwidth_fraction) / batch
            + kv_seconds(cm, cm.kv.layer_tokens(context), bandwidth_fraction))


def _sum_min(lo: int, hi: int, window: int) -> int:
    """sum_{c=lo}^{hi} min(c, window), for 1 <= lo <= hi."""
    if hi <= window:
        return (lo + hi) * (hi - lo + 1) // 2
    if lo > window:
        return (hi - lo + 1) * window
    return (lo + window) * (window - lo + 1) // 2 + (hi - window) * window


def decode_layer_tokens(kv: KvLayout, first_context: int, count: int) -> int:
    """KV (tokens summed over layers) that `count` consecutive decode tokens read, the first at
    `first_context` and each next one attending to one more: sum of kv.layer_tokens(c) for c
    in first_context .. first_context + count - 1, in closed form."""
    if count <= 0:
        return 0
    lo, hi = max(1, first_context), max(1, first_context) + count - 1
    total = 0
    for window, layers in kv.layer_groups:
        total += layers * ((lo + hi) * count // 2 if window is None else _sum_min(lo, hi, window))
    return total
