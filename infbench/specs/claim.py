"""Check a tokens/s-per-user claim against the memory-bandwidth floor.

At batch 1 each decoded token must stream every active weight and its KV from HBM once,
so one token takes at least bytes / datasheet bandwidth: a per-user speed above
datasheet bandwidth / bytes is impossible without changing what is read. The check then
says which unstated condition would make the claim true: quantized weights/KV, a larger
TP degree (bandwidth adds up across GPUs, minus all-reduce time), a short context, or
speculative decoding (several tokens accepted per weight pass).
"""

from __future__ import annotations

from dataclasses import dataclass

from infbench.specs.errors import SpecError
from infbench.specs.formats import FormatSpec, get_format
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, GpuSpec
from infbench.specs.models import ModelSpec
from infbench.specs.roofline import StepBreakdown, cost_model, step_time_from_cost

# Mean tokens per target pass that published speculative decoding setups reach
# (EAGLE/Medusa/n-gram drafts report roughly 2-4 on chat workloads).
PLAUSIBLE_SPECULATIVE_TOKENS = 4.0


@dataclass(frozen=True)
class Condition:
    condition: str
    ceiling_tokens_per_s_per_user: float  # at 100% of datasheet bandwidth
    makes_it_true: bool


@dataclass(frozen=True)
class ClaimReport:
    model: str
    gpu: str
    tp: int
    weight_format: str
    kv_format: str
    context: int
    batch: int
    claimed_tokens_per_s_per_user: float
    bytes_per_token: float  # per GPU, one decode step at the stated batch, divided by batch
    step: StepBreakdown  # at 100% bandwidth and compute
    ceiling_tokens_per_s_per_user: float  # 1 / step time at datasheet peaks
    typical_tokens_per_s_per_user: float  # at the default achievable fractions
    verdict: str  # "plausible", "needs near-peak bandwidth", "impossible as stated"
    speculative_tokens_needed: float  # claim / ceiling: tokens each pass must yield
    conditions: tuple[Condition, ...]


def _ceiling(model: ModelSpec, gpu: GpuSpec, tp: int, wf: str | FormatSpec, kf: str | FormatSpec,
             batch: int, context: int) -> StepBreakdown:
    return step_time_from_cost(cost_model(model, gpu, tp, wf, kf), (), [context] * batch, 1.0, 1.0)


def check_claim(
    model: ModelSpec,
    gpu: GpuSpec,
    claimed_tokens_per_s_per_user: float,
    tp: int = 1,
    weight_format: str | FormatSpec = "bf16",
    kv_format: str | FormatSpec = "bf16",
    context: int = 1024,
    batch: int = 1,
) -> ClaimReport:
    if not claimed_tokens_per_s_per_user > 0:
        raise SpecError(
            f"claimed tokens/s per user must be > 0, got {claimed_tokens_per_s_per_user!r}"
        )
    for name, value in (("context", context), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{name} must be a positive integer, got {value!r}")
    claim = claimed_tokens_per_s_per_user
    step = _ceiling(model, gpu, tp, weight_format, kv_format, batch, context)
    ceiling = 1 / step.seconds
    typical_step = step_time_from_cost(
        cost_model(model, gpu, tp, weight_format, kv_format),
        (),
        [context] * batch,
        DEFAULT_BANDWIDTH_FRACTION,
    )
    typical = 1 / typical_step.seconds
    if claim <= typical:
        verdict = "plausible"
    elif claim <= ceiling:
        verdict = "needs near-peak bandwidth"
    else:
        verdict = "impossible as stated"

    conditions: list[Condition] = []

    def add(text: str, s: StepBreakdown) -> None:
        conditions.append(Condition(text, 1 / s.seconds, claim <= 1 / s.seconds))

    if batch > 1:
        add(
            "batch 1 (the stated batch shares each weight pass)",
            _ceiling(model, gpu, tp, weight_format, kv_format, 1, context),
        )
    current = get_format(weight_format).bytes_per_element
    for wf, kf in (("fp8", "fp8"), ("int4", "fp8"), ("nvfp4", "fp8")):
        if get_format(wf).bytes_per_element < current:
            add(
                f"weights {get_format(wf).name}, KV {kf}",
                _ceiling(model, gpu, tp, wf, kf, batch, context),
            )
    for bigger in (2, 4, 8, 16):
        if bigger > tp and model.num_attention_heads % bigger == 0:
            try:
                s = _ceiling(model, gpu, bigger, weight_format, kv_format, batch, context)
            except SpecError:
                continue
            add(f"tp={bigger}", s)
    if context > 1:
        add(
            "context of 1 token (no KV to read)",
            _ceiling(model, gpu, tp, weight_format, kv_format, batch, 1),
        )
    needed = claim / ceiling
    conditions.append(
        Condition(
            f"speculative decoding yielding {needed:.2f} tokens per target pass",
            ceiling * PLAUSIBLE_SPECULATIVE_TOKENS,
            needed <= PLAUSIBLE_SPECULATIVE_TOKENS,
        )
    )
    return ClaimReport(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        weight_format=get_format(weight_format).name,
        kv_format=get_format(kv_format).name,
        context=context,
        batch=batch,
        claimed_tokens_per_s_per_user=claim,
        bytes_per_token=step.bytes_moved / batch,
        step=step,
        ceiling_tokens_per_s_per_user=ceiling,
        typical_tokens_per_s_per_user=typical,
        verdict=verdict,
        speculative_tokens_needed=needed,
        conditions=tuple(conditions),
    )
