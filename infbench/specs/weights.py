"""Weight bytes per GPU in a given format.

Quantized checkpoints (FP8, GPTQ/AWQ int4, MXFP4, NVFP4) quantize the linear layers; the
embedding, the output head and the norms stay 16-bit, which is what vLLM loads for them.
Every weight is split evenly across TP ranks (vocab-parallel embedding and head included);
norms are replicated but are too small to matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from infbench.specs.formats import FormatSpec, get_format
from infbench.specs.models import ModelSpec

UNQUANTIZED_BYTES = 2  # embedding, lm_head and norms: bf16


@dataclass(frozen=True)
class WeightBytes:
    format: str
    tp: int
    linear_bytes: float  # all linear layers (attention, MLPs, experts, routers), quantized
    embedding_bytes: float  # embedding, plus the head when it is not tied
    norm_bytes: float
    # read every decode step whatever the batch: non-expert linears, the head, the norms
    always_read_bytes: float
    expert_bytes: float  # one routed expert of one MoE layer (0 for dense models)

    @property
    def total_bytes(self) -> float:
        return self.linear_bytes + self.embedding_bytes + self.norm_bytes

    @property
    def per_gpu_bytes(self) -> float:
        return self.total_bytes / self.tp

    @property
    def always_read_per_gpu(self) -> float:
        return self.always_read_bytes / self.tp

    @property
    def expert_per_gpu(self) -> float:
        return self.expert_bytes / self.tp


def weight_bytes(
    model: ModelSpec, weight_format: str | FormatSpec = "bf16", tp: int = 1
) -> WeightBytes:
    fmt = get_format(weight_format)
    p = model.params
    b = fmt.bytes_per_element
    linear = p.attention + p.dense_mlp + p.routed_experts + p.shared_experts + p.routers
    non_expert_linear = linear - p.routed_experts
    head = p.embedding  # the head matrix is read for every logit, tied or not
    expert = 0.0
    if model.moe is not None:
        expert = p.routed_experts / (model.moe.num_moe_layers * model.moe.num_experts) * b
    return WeightBytes(
        format=fmt.name,
        tp=tp,
        linear_bytes=linear * b,
        embedding_bytes=(p.embedding + p.lm_head) * UNQUANTIZED_BYTES,
        norm_bytes=p.norms * UNQUANTIZED_BYTES,
        always_read_bytes=non_expert_linear * b
        + head * UNQUANTIZED_BYTES
        + p.norms * UNQUANTIZED_BYTES,
        expert_bytes=expert,
    )
