"""The startup memory budget, in the order vLLM takes it, and what to change when it fails.

    budget    = total x gpu_memory_utilization
    KV pool   = budget - weights/GPU - peak activation - non-torch memory - CUDA graphs
    blocks    = KV pool // (block_size x KV bytes per token per GPU)

The engine refuses to start when the pool cannot hold one sequence of `max_model_len`
(vLLM V1: `check_enough_kv_cache_memory`); `error` reproduces that message. Activation,
non-torch and CUDA-graph terms are estimates (vLLM measures them with a profile run);
each can be overridden with a figure read from the engine's startup log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from infbench.specs.errors import SpecError
from infbench.specs.formats import FormatSpec, get_format
from infbench.specs.gpus import GIB, GpuSpec
from infbench.specs.kv import KvLayout, kv_layout
from infbench.specs.models import ModelSpec
from infbench.specs.parallel import check_tp
from infbench.specs.weights import weight_bytes

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # vLLM V1's profile-run token count for online serving
DEFAULT_MAX_NUM_SEQS = 256
CUDA_CONTEXT_BYTES = GIB // 4
"""CUDA context and cuBLAS workspaces outside PyTorch's allocator (vLLM's "non-torch")."""
TP_COMM_BUFFER_BYTES = GIB
"""NCCL channels and vLLM's custom all-reduce buffers, added when tp > 1."""
CUDA_GRAPH_BYTES = GIB // 2
"""vLLM typically logs 0.2-1.5 GiB for graph capture; 0.5 GiB is the usual order."""
SAMPLER_BYTES_PER_LOGIT = 8  # fp32 logits plus an fp32 probability copy in the sampler

# (weights, KV) formats offered as the quantization fix, least accuracy risk first.
_QUANT_FIXES = (("bf16", "fp8"), ("fp8", "bf16"), ("fp8", "fp8"), ("int4", "fp8"))


@dataclass(frozen=True)
class Fix:
    change: str  # e.g. "tp=4"
    settings: dict  # the arguments to plan_memory that make it fit
    kv_tokens: int  # KV capacity per GPU after the change
    cost: str  # what the change costs the user (or, when it does not fit, why not)
    fits: bool = True


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    gpu: str
    tp: int
    weight_format: str
    kv_format: str
    total_bytes: int
    gpu_memory_utilization: float
    budget_bytes: float
    weights_bytes: float  # per GPU
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    kv_pool_bytes: float  # per GPU, 0 when the terms above overrun the budget
    remaining_bytes: float  # budget minus all terms; negative when they overrun it
    kv_bytes_per_token: float  # per GPU, every layer
    block_size: int
    bytes_per_block: float
    num_blocks: int
    kv_tokens: int  # num_blocks x block_size
    max_model_len: int
    needed_bytes: float  # KV one max_model_len sequence needs, per GPU
    fits: bool
    failing_term: (
        str | None
    )  # None, "weights", "activation", "non_torch", "cuda_graphs", "kv_cache"
    max_model_len_that_fits: int
    error: str | None
    fixes: tuple[Fix, ...] = ()
    layout: KvLayout | None = field(default=None, repr=False, compare=False)

    def max_concurrency(self, context: int) -> int:
        """Sequences of `context` tokens the pool holds at once."""
        if context < 1:
            raise SpecError(f"context must be a positive integer, got {context!r}")
        assert self.layout is not None
        per_seq_blocks = (
            sum(
                math.ceil((context if w is None else min(context, w)) / self.block_size) * n
                for w, n in self.layout.layer_groups
            )
            / self.layout.num_layers
        )
        return int(self.num_blocks // per_seq_blocks) if per_seq_blocks else 0


def activation_estimate(
    model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    """Peak activation of the profile run: residual + hidden in, the widest layer
    intermediate (qkv and attention output, or the MLP/expert gate-up-down chain), and the
    sampler's logits for `max_num_seqs` sequences (gathered to the full vocabulary)."""
    t = max_num_batched_tokens
    hidden = 2 * model.hidden_size
    q_out = model.q_dim
    attn = (q_out * 2 + 2 * model.num_kv_heads * model.head_dim) / tp
    mlp = 3 * model.intermediate_size / tp
    if model.moe is not None:
        # fused MoE keeps gate-up (2N), activated (N) and the down output per routed copy
        n = model.moe.expert_intermediate_size / tp
        mlp = max(mlp, model.moe.experts_per_token * (3 * n + model.hidden_size))
    per_token = (hidden + max(attn, mlp)) * 2  # bf16 activations
    return t * per_token + max_num_seqs * model.vocab_size * SAMPLER_BYTES_PER_LOGIT


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{name} must be a positive integer, got {value!r}")
    return value


def _gib(x: float) -> str:
    return f"{x / GIB:.2f} GiB"


def plan_memory(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int = 1,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    block_size: int = 16,
    weight_format: str | FormatSpec = "bf16",
    kv_format: str | FormatSpec = "bf16",
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    enforce_eager: bool = False,
    activation_bytes: float | None = None,
    non_torch_bytes: float | None = None,
    cuda_graph_bytes: float | None = None,
    total_memory_bytes: int | None = None,
    suggest_fixes: bool = True,
) -> MemoryPlan:
    """The startup budget per GPU; `fixes` lists priced changes when it does not fit."""
    check_tp(model, tp)
    if not 0 < gpu_memory_utilization <= 1:
        raise SpecError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
    if max_model_len is None:
        if model.max_position_embeddings is None:
            raise SpecError(
                f"max_model_len is required: {model.name} has no max_position_embeddings"
            )
        max_model_len = model.max_position_embeddings
    _positive("max_model_len", max_model_len)
    _positive("block_size", block_size)
    _positive("max_num_batched_tokens", max_num_batched_tokens)
    _positive("max_num_seqs", max_num_seqs)
    wfmt, kfmt = get_format(weight_format), get_format(kv_format)
    total = total_memory_bytes if total_memory_bytes is not None else gpu.memory_bytes
    lay = kv_layout(model, tp, kfmt)

    budget = total * gpu_memory_utilization
    weights = weight_bytes(model, wfmt, tp).per_gpu_bytes
    act = (
        activation_estimate(model, tp, max_num_batched_tokens, max_num_seqs)
        if activation_bytes is None
        else activation_bytes
    )
    non_torch = (
        CUDA_CONTEXT_BYTES + (TP_COMM_BUFFER_BYTES if tp > 1 else 0)
        if non_torch_bytes is None
        else non_torch_bytes
    )
    graphs = (
        0 if enforce_eager else (CUDA_GRAPH_BYTES if cuda_graph_bytes is None else cuda_graph_bytes)
    )

    failing: str | None = None
    remaining = budget
    for term, amount in (
        ("weights", weights),
        ("activation", act),
        ("non_torch", non_torch),
        ("cuda_graphs", graphs),
    ):
        remaining -= amount
        if remaining < 0 and failing is None:
            failing = term
    pool = max(0.0, remaining)
    per_block = lay.bytes_per_token_per_gpu * block_size
    num_blocks = int(pool // per_block)

    def seq_bytes(length: int) -> float:
        # vLLM charges whole blocks for each layer group
        return (
            sum(
                math.ceil((length if w is None else min(length, w)) / block_size) * block_size * n
                for w, n in lay.layer_groups
            )
            * lay.bytes_per_token_per_layer_per_gpu
        )

    needed = seq_bytes(max_model_len)
    usable = num_blocks * per_block
    lo, hi = 0, max_model_len
    while lo < hi:  # largest length whose KV fits, as vLLM's estimate does
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if seq_bytes(mid) <= usable else (lo, mid - 1)
    fits_len = lo
    if failing is None and needed > usable:
        failing = "kv_cache"

    error = None
    if failing is not None:
        if weights > total:
            error = (
                f"torch.OutOfMemoryError: CUDA out of memory while loading weights: "
                f"{_gib(weights)} per GPU does not fit in {_gib(total)} of GPU memory"
            )
        elif num_blocks == 0:
            error = (
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine."
            )
        else:
            error = (
                f"ValueError: To serve at least one request with the models's max seq len "
                f"({max_model_len}), ({_gib(needed)} KV cache is needed, which is larger "
                f"than the available KV cache memory ({_gib(usable)}). Based on the "
                f"available memory, the estimated maximum model length is {fits_len}. Try "
                f"increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                f"initializing the engine."
            )
    plan = MemoryPlan(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        weight_format=wfmt.name,
        kv_format=kfmt.name,
        total_bytes=total,
        gpu_memory_utilization=gpu_memory_utilization,
        budget_bytes=budget,
        weights_bytes=weights,
        activation_bytes=act,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=graphs,
        kv_pool_bytes=pool,
        remaining_bytes=remaining,
        kv_bytes_per_token=lay.bytes_per_token_per_gpu,
        block_size=block_size,
        bytes_per_block=per_block,
        num_blocks=num_blocks,
        kv_tokens=num_blocks * block_size,
        max_model_len=max_model_len,
        needed_bytes=needed,
        fits=failing is None,
        failing_term=failing,
        max_model_len_that_fits=fits_len,
        error=error,
        layout=lay,
    )
    if plan.fits or not suggest_fixes:
        return plan
    kwargs = dict(
        tp=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        block_size=block_size,
        weight_format=wfmt,
        kv_format=kfmt,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        enforce_eager=enforce_eager,
        activation_bytes=activation_bytes,
        non_torch_bytes=non_torch_bytes,
        cuda_graph_bytes=cuda_graph_bytes,
        total_memory_bytes=total_memory_bytes,
    )
    return replace(plan, fixes=tuple(_fixes(model, gpu, plan, kwargs)))


def _fixes(model: ModelSpec, gpu: GpuSpec, plan: MemoryPlan, kwargs: dict) -> list[Fix]:
    """Each single change that makes the plan fit, with what it costs."""

    def attempt(**changes: object) -> MemoryPlan | None:
        try:
            p = plan_memory(model, gpu, **{**kwargs, **changes, "suggest_fixes": False})
        except SpecError:
            return None
        return p if p.fits else None

    fixes: list[Fix] = []
    tp = plan.tp
    for bigger in (2, 4, 8, 16, 32, 64):
        if bigger <= tp:
            continue
        p = attempt(tp=bigger)
        if p is not None:
            fixes.append(
                Fix(
                    f"tp={bigger}",
                    {"tp": bigger},
                    p.kv_tokens,
                    f"{bigger - tp} more GPU(s) ({bigger} instead of {tp}); more all-reduce "
                    f"traffic per token",
                )
            )
            break
    else:
        fixes.append(Fix("more GPUs (tp)", {}, 0, "no TP degree up to 64 fits", fits=False))
    if plan.failing_term == "kv_cache" and plan.max_model_len_that_fits >= plan.block_size:
        length = plan.max_model_len_that_fits
        p = attempt(max_model_len=length)
        if p is not None:
            fixes.append(
                Fix(
                    f"max_model_len={length}",
                    {"max_model_len": length},
                    p.kv_tokens,
                    f"prompts + outputs longer than {length} tokens are rejected "
                    f"({plan.max_model_len - length} tokens less context); room for "
                    f"{p.max_concurrency(length)} such sequence(s)",
                )
            )
    # utilization: the smallest setting (to 0.01) that fits, if any does below 0.99
    util = plan.gpu_memory_utilization
    for step in range(int(util * 100) + 1, 100):
        p = attempt(gpu_memory_utilization=step / 100)
        if p is not None:
            fixes.append(
                Fix(
                    f"gpu_memory_utilization={step / 100:.2f}",
                    {"gpu_memory_utilization": step / 100},
                    p.kv_tokens,
                    f"{_gib((1 - step / 100) * plan.total_bytes)} left for other processes and "
                    f"allocator fragmentation (was {_gib((1 - util) * plan.total_bytes)})",
                )
            )
            break
    else:
        short = (
            plan.needed_bytes - plan.kv_pool_bytes
            if plan.failing_term == "kv_cache"
            else (-plan.remaining_bytes)
        )
        fixes.append(
            Fix(
                "gpu_memory_utilization",
                {},
                0,
                f"no setting up to 0.99 fits: {_gib(short)} short, "
                f"{_gib(0.99 * plan.total_bytes - plan.budget_bytes)} gained at 0.99",
                fits=False,
            )
        )
    current_w = get_format(plan.weight_format).bytes_per_element
    current_k = get_format(plan.kv_format).bytes_per_element
    for wname, kname in _QUANT_FIXES:
        w_b, k_b = get_format(wname).bytes_per_element, get_format(kname).bytes_per_element
        if w_b > current_w or k_b > current_k or (w_b, k_b) == (current_w, current_k):
            continue
        p = attempt(weight_format=wname, kv_format=kname)
        if p is None:
            continue
        no_fp8 = "fp8" in (wname, kname) and gpu.fp8_flops is None
        fixes.append(
            Fix(
                f"weights {get_format(wname).name}, KV {kname}",
                {"weight_format": wname, "kv_format": kname},
                p.kv_tokens,
                "a quantized checkpoint or KV cache: some accuracy risk, evaluate before serving"
                + (f"; {gpu.name} has no FP8 tensor cores (weight-only kernels)" if no_fp8 else ""),
            )
        )
        break
    else:
        fixes.append(Fix("quantization", {}, 0, "no offered weight/KV format fits", fits=False))
    return fixes
