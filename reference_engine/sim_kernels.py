"""The kernels of one sim step, for the synthetic profiler trace: names, durations, gaps.

The step's device time (what the sim waited for its kernels) is shared among the kernels in
proportion to the bytes each reads, since decode kernels are memory-bound: per layer the
qkv and output projections (the attention weights, split by head counts), attention (the
layer's KV reads), the MLP up and down projections (2/3 and 1/3 of the MLP weights), and at
the end the LM head (the head, embedding and anything else). Tensor parallelism adds two
all-reduces per layer that share the step's all-reduce time. Launch time becomes gaps before
the kernels that were launched eagerly. LoRA adapters (lora.py) add a shrink and an expand
kernel per layer after the MLP, sharing the step's LoRA time.
"""

from __future__ import annotations

from typing import Any

from infbench.specs.weights import weight_bytes

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def step_kernels(ex: Any, parts: dict[str, Any]) -> list[tuple[str, float, float]]:
    """[(name, duration_s, gap_before_s)] in launch order."""
    bd = parts["breakdown"]
    launch, graph = parts["launch_s"], parts["graph"]
    m = ex.model
    layers = m.num_layers
    w = weight_bytes(m, ex.weight_format, ex.tp)
    p = m.params
    per_b = w.linear_bytes / max(1, p.attention + p.dense_mlp + p.routed_experts
                                 + p.shared_experts + p.routers) / ex.tp
    attn = p.attention * per_b / layers
    heads, kv = m.num_attention_heads, m.num_kv_heads
    qkv = attn * (heads + 2 * kv) / (2 * heads + 2 * kv)
    mlp = max(0.0, bd.weight_bytes - p.attention * per_b - w.embedding_bytes / ex.tp
              - w.norm_bytes / ex.tp) / layers
    kv_layer = bd.kv_bytes / layers
    head = max(0.0, bd.bytes_moved - layers * (attn + mlp + kv_layer))
    shares = [("sim::qkv_proj", qkv), ("sim::attention_decode", kv_layer),
              ("sim::o_proj", attn - qkv), ("sim::mlp_gate_up", 2 * mlp / 3),
              ("sim::mlp_down", mlp / 3)]
    total = max(bd.bytes_moved, 1.0)
    lora_s = parts.get("lora_s", 0.0)
    compute_s = parts["device_s"] - launch - lora_s - bd.comm_s * (ex.collective_factor)
    comm_s = parts["device_s"] - launch - lora_s - compute_s
    per_layer_kernels = len(shares) + (2 if ex.tp > 1 else 0)
    eager = not graph
    gap_all = launch / (layers * per_layer_kernels + 1) if eager else 0.0
    gap_attn = launch / layers if graph and launch > 0 else 0.0  # piecewise: attention eager
    out: list[tuple[str, float, float]] = []
    for _ in range(layers):
        for name, b in shares:
            gap = gap_attn if name == "sim::attention_decode" else gap_all
            out.append((name, compute_s * b / total, gap))
            if ex.tp > 1 and name in ("sim::o_proj", "sim::mlp_down"):
                out.append((NCCL, comm_s / (2 * layers), gap_all))
        if lora_s > 0:
            out.append(("sim::lora_shrink", lora_s / (2 * layers), gap_all))
            out.append(("sim::lora_expand", lora_s / (2 * layers), gap_all))
    out.append(("sim::lm_head", compute_s * head / total, gap_all))
    return out
