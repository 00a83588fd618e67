"""Step time from the roofline: bytes moved over bandwidth vs FLOPs over peak.

A step (prefill chunks and decodes batched together) costs
`max(bytes / (bandwidth x bw_fraction), flops / (peak x flops_fraction)) + all-reduce time`.

Bytes: the weights read once per step (for MoE, only the experts the step's tokens route to:
E x (1 - (1 - k/E)^T) distinct experts per layer in expectation for T tokens), plus the KV
each attention layer reads (each decode reads its context once; each prefill chunk reads
its context and itself once). Activations are not counted; they are small next to weights
at decode and the step is compute-bound at prefill.
FLOPs: 2 per multiply-accumulate over the active linear weights for every token, the output
head for sampled tokens, and attention (QK^T and PV) for every (query, key) pair, causal
within a prefill chunk and capped by sliding windows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from infbench.specs.allreduce import ACTIVATION_BYTES, DEFAULT_ALPHA_S, ring_time
from infbench.specs.errors import SpecError
from infbench.specs.formats import FormatSpec, get_format
from infbench.specs.gpus import (
    DEFAULT_BANDWIDTH_FRACTION,
    DEFAULT_FLOPS_FRACTION,
    DEFAULT_INTERCONNECT_FRACTION,
    GpuSpec,
)
from infbench.specs.kv import KvLayout, kv_layout
from infbench.specs.models import ModelSpec
from infbench.specs.weights import weight_bytes


@dataclass(frozen=True)
class CostModel:
    """Per-GPU coefficients of one (model, gpu, tp, formats); built once, used every step."""

    always_read_bytes: float
    expert_bytes: float
    moe_layers: int
    num_experts: int
    experts_per_token: int
    linear_flops_per_token: float
    head_flops_per_sampled_token: float
    kv: KvLayout
    kv_bytes_per_layer_token: float
    decode_pair_flops: float  # one (query, key) pair in one layer
    prefill_pair_flops: float
    full_attention_only: bool
    bandwidth: float  # datasheet bytes/s
    peak_flops: float  # datasheet dense FLOP/s for the weight format's compute type
    tp: int
    num_layers: int
    allreduce_bytes_per_token: int
    link_bandwidth: float  # per direction, achievable

    def expected_experts(self, tokens: int) -> float:
        """Distinct experts per MoE layer that `tokens` uniformly routed tokens touch."""
        if self.num_experts == 0 or tokens <= 0:
            return 0.0
        k, e = self.experts_per_token, self.num_experts
        return e * (1.0 - (1.0 - k / e) ** tokens)


def cost_model(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int = 1,
    weight_format: str | FormatSpec = "bf16",
    kv_format: str | FormatSpec = "bf16",
) -> CostModel:
    # Memoized on the model object: the engine calls step_time every step.
    cache: dict = model.__dict__.setdefault("_cost_models", {})
    key = (gpu, tp, weight_format, kv_format)
    found = cache.get(key)
    if found is not None:
        return found
    wfmt = get_format(weight_format)
    lay = kv_layout(model, tp, kv_format)
    w = weight_bytes(model, wfmt, tp)
    p = model.params
    heads = model.num_attention_heads // tp
    if model.mla is not None:
        a = model.mla
        # Decode runs MLA "absorbed": scores and values over the latent itself.
        decode_pair = heads * (2 * (a.kv_lora_rank + a.qk_rope_head_dim) + 2 * a.kv_lora_rank)
        prefill_pair = heads * (2 * (a.qk_nope_head_dim + a.qk_rope_head_dim) + 2 * a.v_head_dim)
    else:
        decode_pair = prefill_pair = heads * 4 * model.head_dim
    linear = p.attention + p.dense_mlp + p.shared_experts + p.routers + p.active_routed_experts
    moe = model.moe
    cm = CostModel(
        always_read_bytes=w.always_read_per_gpu,
        expert_bytes=w.expert_per_gpu,
        moe_layers=moe.num_moe_layers if moe else 0,
        num_experts=moe.num_experts if moe else 0,
        experts_per_token=moe.experts_per_token if moe else 0,
        linear_flops_per_token=2 * linear / tp,
        head_flops_per_sampled_token=2 * p.embedding / tp,
        kv=lay,
        kv_bytes_per_layer_token=lay.bytes_per_token_per_layer_per_gpu,
        decode_pair_flops=decode_pair,
        prefill_pair_flops=prefill_pair,
        full_attention_only=not model.has_sliding_window,
        bandwidth=gpu.memory_bandwidth,
        peak_flops=gpu.peak_flops(wfmt.compute),
        tp=tp,
        num_layers=model.num_layers,
        allreduce_bytes_per_token=model.hidden_size * ACTIVATION_BYTES,
        link_bandwidth=gpu.interconnect_bandwidth_per_direction * DEFAULT_INTERCONNECT_FRACTION,
    )
    cache[key] = cm
    return cm


@dataclass(frozen=True)
class StepBreakdown:
    seconds: float  # max(memory_s, compute_s) + comm_s
    memory_s: float
    compute_s: float
    comm_s: float  # TP all-reduces (0 at tp=1)
    bytes_moved: float  # per GPU
    weight_bytes: float
    kv_bytes: float
    flops: float  # per GPU
    tokens: int

    @property
    def bound(self) -> str:
        if self.tokens == 0:
            return "idle"
        return "compute" if self.compute_s > self.memory_s else "memory"


def _causal_pairs(chunk: int, before: int, window: int | None) -> int:
    """Sum over the chunk's queries of the keys each attends to: sum_{j=before+1}^{before+chunk}
    min(j, window)."""
    lo, hi = before + 1, before + chunk
    if window is None or hi <= window:
        return (lo + hi) * chunk // 2
    if lo >= window:
        return chunk * window
    return (lo + window) * (window - lo + 1) // 2 + (hi - window) * window


def _check_fraction(name: str, value: float) -> float:
    if not 0 < value <= 1:
        raise SpecError(f"{name} must be in (0, 1], got {value!r}")
    return value


def step_time_from_cost(
    cm: CostModel,
    prefill_chunks: Iterable[tuple[int, int]] = (),
    decode_contexts: Sequence[int] = (),
    bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION,
    flops_fraction: float = DEFAULT_FLOPS_FRACTION,
    alpha_s: float = DEFAULT_ALPHA_S,
) -> StepBreakdown:
    lay = cm.kv
    num_decode = len(decode_contexts)
    decode_layer_tokens = 0
    if num_decode:
        total = sum(decode_contexts)
        if cm.full_attention_only:
            decode_layer_tokens = total * cm.num_layers
        else:
            longest = max(decode_contexts)
            for window, layers in lay.layer_groups:
                if window is None or longest <= window:
                    decode_layer_tokens += layers * total
                else:
                    decode_layer_tokens += layers * sum(
                        c if c < window else window for c in decode_contexts
                    )
    prefill_tokens = 0
    prefill_read_layer_tokens = 0
    prefill_pairs = 0
    num_chunks = 0
    for chunk, before in prefill_chunks:
        if chunk <= 0 or before < 0:
            raise SpecError(f"prefill chunk ({chunk}, {before}): tokens must be > 0, context >= 0")
        num_chunks += 1
        prefill_tokens += chunk
        prefill_read_layer_tokens += lay.layer_tokens(before + chunk)
        for window, layers in lay.layer_groups:
            prefill_pairs += layers * _causal_pairs(chunk, before, window)
    tokens = num_decode + prefill_tokens
    if tokens == 0:
        return StepBreakdown(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    weights = cm.always_read_bytes + cm.moe_layers * cm.expected_experts(tokens) * cm.expert_bytes
    kv = (decode_layer_tokens + prefill_read_layer_tokens) * cm.kv_bytes_per_layer_token
    flops = (
        tokens * cm.linear_flops_per_token
        # every decode samples; of a prefill chunk at most its last token does
        + (num_decode + num_chunks) * cm.head_flops_per_sampled_token
        + decode_layer_tokens * cm.decode_pair_flops
        + prefill_pairs * cm.prefill_pair_flops
    )
    memory_s = (weights + kv) / (cm.bandwidth * bandwidth_fraction)
    compute_s = flops / (cm.peak_flops * flops_fraction)
    comm_s = 0.0
    if cm.tp > 1:
        size = tokens * cm.allreduce_bytes_per_token
        comm_s = 2 * cm.num_layers * ring_time(size, cm.tp, alpha_s, cm.link_bandwidth)
    return StepBreakdown(
        seconds=max(memory_s, compute_s) + comm_s,
        memory_s=memory_s,
        compute_s=compute_s,
        comm_s=comm_s,
        bytes_moved=weights + kv,
        weight_bytes=weights,
        kv_bytes=kv,
        flops=flops,
        tokens=tokens,
    )


def step_time(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int = 1,
    weight_format: str | FormatSpec = "bf16",
    kv_format: str | FormatSpec = "bf16",
    prefill_chunks: Iterable[tuple[int, int]] = (),
    decode_contexts: Sequence[int] = (),
    bandwidth_fraction: float = DEFAULT_BANDWIDTH_FRACTION,
    flops_fraction: float = DEFAULT_FLOPS_FRACTION,
    alpha_s: float = DEFAULT_ALPHA_S,
) -> StepBreakdown:
    """Roofline time of one engine step (per GPU; the engine's fixed overhead excluded).

    `prefill_chunks` is a list of (chunk_tokens, context_before_chunk); `decode_contexts`
    holds, for each decoding sequence, the number of tokens its new token attends to.
    """
    _check_fraction("bandwidth_fraction", bandwidth_fraction)
    _check_fraction("flops_fraction", flops_fraction)
    return step_time_from_cost(
        cost_model(model, gpu, tp, weight_format, kv_format),
        prefill_chunks,
        decode_contexts,
        bandwidth_fraction,
        flops_fraction,
        alpha_s,
    )
