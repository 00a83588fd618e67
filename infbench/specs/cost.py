"""Price per million tokens from a GPU's hourly price and each phase's throughput.

    $/M input  = price_per_gpu_hour x GPUs / 3600 / input tokens per s  x 1e6
    $/M output = price_per_gpu_hour x GPUs / 3600 / output tokens per s x 1e6

Each phase is charged the whole replica as if it ran alone: the two prices answer "what
would a replica doing only this cost", the usual way providers split them. Throughputs
come from the roofline (prefill of `prompt_tokens` in chunks; decode at `batch` and
`context`) unless measured figures are given.
"""

from __future__ import annotations

from dataclasses import dataclass

from infbench.specs.errors import SpecError
from infbench.specs.formats import FormatSpec
from infbench.specs.gpus import DEFAULT_BANDWIDTH_FRACTION, DEFAULT_FLOPS_FRACTION, GpuSpec
from infbench.specs.memory import DEFAULT_MAX_NUM_BATCHED_TOKENS
from infbench.specs.models import ModelSpec
from infbench.specs.roofline import cost_model, step_time_from_cost
from infbench.specs.throughput import ttft


@dataclass(frozen=True)
class CostReport:
    model: str
    gpu: str
    tp: int
    price_per_gpu_hour: float
    replica_price_per_s: float
    input_tokens_per_s: float
    input_source: str  # "roofline" or "measured"
    output_tokens_per_s: float
    output_source: str
    usd_per_million_input: float
    usd_per_million_output: float
    batch: int
    context: int
    prompt_tokens: int


def cost_report(
    model: ModelSpec,
    gpu: GpuSpec,
    price_per_gpu_hour: float,
    tp: int = 1,
    weight_format: str | FormatSpec = "bf16",
    kv_format: str | FormatSpec = "bf16",
    batch: int = 64,
    context: int = 2048,
    prompt_tokens: int = 2048,
    chunk_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    input_tokens_per_s: float | None = None,
    output_tokens_per_s: float | None = None,
    bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION,
    flops_fraction: float = DEFAULT_FLOPS_FRACTION,
) -> CostReport:
    if not price_per_gpu_hour > 0:
        raise SpecError(f"price per GPU-hour must be > 0, got {price_per_gpu_hour!r}")
    for name, value in (
        ("batch", batch),
        ("context", context),
        ("prompt_tokens", prompt_tokens),
        ("chunk_tokens", chunk_tokens),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{name} must be a positive integer, got {value!r}")
    for name, rate in (
        ("input tokens/s", input_tokens_per_s),
        ("output tokens/s", output_tokens_per_s),
    ):
        if rate is not None and not rate > 0:
            raise SpecError(f"measured {name} must be > 0, got {rate!r}")
    cm = cost_model(model, gpu, tp, weight_format, kv_format)
    in_src = out_src = "measured"
    if input_tokens_per_s is None:
        seconds, _ = ttft(cm, prompt_tokens, chunk_tokens, bandwidth_fraction, flops_fraction)
        input_tokens_per_s, in_src = prompt_tokens / seconds, "roofline"
    if output_tokens_per_s is None:
        step = step_time_from_cost(cm, (), [context] * batch, bandwidth_fraction, flops_fraction)
        output_tokens_per_s, out_src = batch / step.seconds, "roofline"
    per_s = price_per_gpu_hour * tp / 3600
    return CostReport(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        price_per_gpu_hour=price_per_gpu_hour,
        replica_price_per_s=per_s,
        input_tokens_per_s=input_tokens_per_s,
        input_source=in_src,
        output_tokens_per_s=output_tokens_per_s,
        output_source=out_src,
        usd_per_million_input=per_s / input_tokens_per_s * 1e6,
        usd_per_million_output=per_s / output_tokens_per_s * 1e6,
        batch=batch,
        context=context,
        prompt_tokens=prompt_tokens,
    )
