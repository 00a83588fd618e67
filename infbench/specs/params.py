"""Parameter counts derived from a model's shapes (never typed in).

Counts follow the module layout `transformers` builds for each family: q/k/v/o (or the MLA
projections), gated MLP (gate, up, down), routed and shared experts with their router,
norms, the embedding and, unless tied, the output head. Multi-token-prediction layers
(DeepSeek-V3's `num_nextn_predict_layers`) are excluded, as the published 671 B is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infbench.specs.models import ModelSpec


@dataclass(frozen=True)
class ParamCount:
    embedding: int
    lm_head: int  # 0 when tied to the embedding
    attention: int  # all layers
    dense_mlp: int  # all non-MoE MLP layers
    routed_experts: int  # all routed experts of all MoE layers
    shared_experts: int  # shared experts (and their gates) of all MoE layers
    routers: int
    norms: int
    active_routed_experts: int  # routed-expert weights one token touches

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.dense_mlp
            + self.routed_experts
            + self.shared_experts
            + self.routers
            + self.norms
        )

    @property
    def active(self) -> int:
        """Parameters one token's forward pass uses (embedding row counted as published)."""
        return self.total - self.routed_experts + self.active_routed_experts

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.lm_head

    @property
    def matmul(self) -> int:
        """Weights one token multiplies against: everything but the embedding lookup."""
        return self.active - self.embedding


def attention_params_per_layer(m: ModelSpec) -> int:
    h = m.hidden_size
    if m.mla is not None:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank is None:
            q = h * m.num_attention_heads * qk_head
        else:
            # q_a_proj, its norm, q_b_proj
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.num_attention_heads * qk_head
        # kv_a_proj_with_mqa (latent + shared rope key), its norm, kv_b_proj (k_nope and v)
        kv = (
            h * (a.kv_lora_rank + a.qk_rope_head_dim)
            + a.kv_lora_rank
            + a.kv_lora_rank * m.num_attention_heads * (a.qk_nope_head_dim + a.v_head_dim)
        )
        o = m.num_attention_heads * a.v_head_dim * h
        return q + kv + o
    q_out = m.num_attention_heads * m.head_dim
    kv_out = m.num_kv_heads * m.head_dim
    qkv = h * (q_out + 2 * kv_out) + (q_out + 2 * kv_out if m.qkv_bias else 0)
    o = q_out * h + (h if m.o_bias else 0)
    return qkv + o


def gated_mlp_params(m: ModelSpec, width: int) -> int:
    """gate_proj, up_proj (hidden -> width) and down_proj (width -> hidden)."""
    bias = (2 * width + m.hidden_size) if m.mlp_bias else 0
    return 3 * m.hidden_size * width + bias


def count_params(m: ModelSpec) -> ParamCount:
    h = m.hidden_size
    moe = m.moe
    moe_layers = moe.num_moe_layers if moe else 0
    dense_layers = m.num_layers - moe_layers
    routed = shared = routers = active_routed = 0
    if moe is not None:
        expert = gated_mlp_params(m, moe.expert_intermediate_size)
        routed = moe_layers * moe.num_experts * expert
        active_routed = moe_layers * moe.experts_per_token * expert
        if moe.shared_intermediate_size:
            per_layer = gated_mlp_params(m, moe.shared_intermediate_size)
            per_layer += h if moe.shared_expert_gate else 0
            shared = moe_layers * per_layer
        routers = moe_layers * (h * moe.num_experts + (moe.num_experts if moe.router_bias else 0))
    embedding = m.vocab_size * h
    return ParamCount(
        embedding=embedding,
        lm_head=0 if m.tie_word_embeddings else embedding,
        attention=m.num_layers * attention_params_per_layer(m),
        dense_mlp=dense_layers * gated_mlp_params(m, m.intermediate_size),
        routed_experts=routed,
        shared_experts=shared,
        routers=routers,
        norms=m.num_layers * m.norms_per_layer * h + h,
        active_routed_experts=active_routed,
    )
