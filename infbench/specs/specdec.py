"""Speculative decoding on the roofline: tokens per step against the cost of verifying them.

A drafter proposes k tokens; the target verifies the k+1 positions (the last token and the
drafts) in one step and keeps the drafts up to the first mismatch plus its own next token.
With each draft accepted with probability α given the one before was (the geometric
model), a step yields on average

    E(α, k) = 1 + α + α² + ... + α^k = (1 − α^(k+1)) / (1 − α)      (k + 1 when α = 1)

tokens per sequence. Its cost: the target step with k+1 tokens per sequence, priced on the
roofline as a prefill chunk of k+1 tokens at the sequence's context (weights read once,
k+1 times the FLOPs), plus k draft positions at `draft_s` each (0 for an n-gram lookup, a
draft model's forward pass otherwise), plus the engine's fixed per-step overhead. Without
speculation the step decodes one token per sequence. Throughput at batch B is
B·E / t_spec against B / t_plain: speculation pays while E·t_plain / t_spec > 1, which holds
while the step is bound by reading the weights and fails once k+1 tokens per sequence make
it compute-bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from infbench.specs.errors import SpecError
from infbench.specs.formats import FormatSpec
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION, GpuSpec
from infbench.specs.models import ModelSpec
from infbench.specs.roofline import step_time


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one verified step yields per sequence: (1 − α^(k+1)) / (1 − α)."""
    if not 0.0 <= alpha <= 1.0:
        raise SpecError(f"acceptance: {alpha} is not in [0, 1]")
    if k < 0:
        raise SpecError(f"num_speculative_tokens: {k} is negative")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class SpecRow:
    batch: int
    plain_step_s: float          # one token per sequence
    spec_step_s: float           # k+1 tokens per sequence verified, drafts included
    plain_tok_s: float
    spec_tok_s: float
    speedup: float
    best_k: int                  # 0: no speculation is best at this batch
    best_tok_s: float


@dataclass(frozen=True)
class SpecPlan:
    alpha: float
    k: int
    context: int
    draft_s: float
    overhead_s: float
    expected_tokens: float
    rows: list[SpecRow]
    costs_above: int | None      # first batch size (of those given) where k costs throughput


def _step_s(model: ModelSpec, gpu: GpuSpec, tp: int, weights: str | FormatSpec,
            kv: str | FormatSpec, batch: int, k: int, context: int, draft_s: float,
            overhead_s: float, bw: float, fl: float) -> float:
    if k == 0:
        bd = step_time(model, gpu, tp, weights, kv, decode_contexts=[context + 1] * batch,
                       bandwidth_fraction=bw, flops_fraction=fl)
        return bd.seconds + overhead_s
    bd = step_time(model, gpu, tp, weights, kv, prefill_chunks=[(k + 1, context)] * batch,
                   bandwidth_fraction=bw, flops_fraction=fl)
    return bd.seconds + overhead_s + k * draft_s


def plan_specdec(model: ModelSpec, gpu: GpuSpec, *, tp: int = 1, weight_format: str | FormatSpec = "bf16",
                 kv_format: str | FormatSpec = "bf16", alpha: float, k: int, context: int,
                 batches: list[int], draft_s: float = 0.0, overhead_s: float = 0.0,
                 max_k: int = 8, bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION,
                 flops_fraction: float = DEFAULT_FLOPS_FRACTION) -> SpecPlan:
    if k < 1:
        raise SpecError(f"num_speculative_tokens: {k} must be >= 1")
    if context < 0 or draft_s < 0 or overhead_s < 0:
        raise SpecError("context, draft cost and overhead must be >= 0")
    if not batches or min(batches) < 1:
        raise SpecError("batch sizes must be >= 1")
    e = expected_tokens(alpha, k)
    rows = []
    args = (model, gpu, tp, weight_format, kv_format)
    for b in sorted(set(batches)):
        steps = {j: _step_s(*args, b, j, context, draft_s, overhead_s, bandwidth_fraction,
                            flops_fraction) for j in range(max(k, max_k) + 1)}
        tok = {j: b * expected_tokens(alpha, j) / s for j, s in steps.items()}
        best = max(tok, key=lambda j: (tok[j], -j))
        rows.append(SpecRow(b, steps[0], steps[k], tok[0], tok[k], tok[k] / tok[0], best, tok[best]))
    costs_above = next((r.batch for r in rows if r.speedup < 1.0), None)
    return SpecPlan(alpha, k, context, draft_s, overhead_s, e, rows, costs_above)
