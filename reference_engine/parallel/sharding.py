"""Megatron-style tensor parallelism for the tiny Llama: which slice of each weight a rank holds.

Column parallel (split along the output dimension, no communication): the fused QKV
projection by attention head, and gate/up by MLP column. Row parallel (split along the input
dimension, partial sums all-reduced): o_proj and down_proj. So each layer all-reduces twice,
and every rank ends each layer holding the same full hidden state. Embeddings, norms and the
LM head are replicated; only rank 0 computes logits and samples.

KV heads are split when the rank count divides them, and replicated otherwise (vLLM's rule
when tensor_parallel_size exceeds num_kv_heads): rank r's query heads then read a copy of the
one KV head their group maps to, so the arithmetic is the unsharded model's.

Weights are generated whole from the seed on every rank, then sliced, so a rank's shard is
bit-for-bit the matching part of the TP=1 model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reference_engine.model import TinyLlama, TinyLlamaConfig


class ShardingError(ValueError):
    """The model cannot be split over this many ranks; the message says which dimension."""


def check_shardable(config: TinyLlamaConfig, world: int) -> None:
    """Raise ShardingError unless every split dimension divides by `world`."""
    if world < 1:
        raise ShardingError(f"tensor_parallel_size must be >= 1, got {world}")
    if config.num_heads % world:
        raise ShardingError(f"tensor_parallel_size {world} does not divide num_heads "
                            f"({config.num_heads})")
    if config.intermediate_size % world:
        raise ShardingError(f"tensor_parallel_size {world} does not divide intermediate_size "
                            f"({config.intermediate_size})")
    if config.num_kv_heads % world and world % config.num_kv_heads:
        raise ShardingError(f"tensor_parallel_size {world} neither divides nor is a multiple of "
                            f"num_kv_heads ({config.num_kv_heads})")


def kv_heads_per_rank(config: TinyLlamaConfig, world: int) -> int:
    return max(1, config.num_kv_heads // world)


def _kv_range(config: TinyLlamaConfig, rank: int, world: int) -> tuple[int, int]:
    """Global KV heads [first, end) rank `rank` holds."""
    if config.num_kv_heads >= world:
        n = config.num_kv_heads // world
        return rank * n, (rank + 1) * n
    # Replicated: all of this rank's query heads fall in one KV group.
    first_q = rank * (config.num_heads // world)
    kv = first_q // (config.num_heads // config.num_kv_heads)
    return kv, kv + 1


def shard_model(model: TinyLlama, rank: int, world: int,
                all_reduce: Callable[[torch.Tensor], torch.Tensor]) -> TinyLlama:
    """Narrow `model` in place to rank `rank`'s shard of `world`; returns it."""
    c = model.config
    check_shardable(c, world)
    if not 0 <= rank < world:
        raise ShardingError(f"rank {rank} is outside 0..{world - 1}")
    d = c.head_dim
    heads = c.num_heads // world
    q_cols = torch.arange(rank * heads * d, (rank + 1) * heads * d)
    kv_first, kv_end = _kv_range(c, rank, world)
    kv_cols = torch.arange(kv_first * d, kv_end * d)
    k_base, v_base = c.num_heads * d, (c.num_heads + c.num_kv_heads) * d
    qkv_cols = torch.cat([q_cols, k_base + kv_cols, v_base + kv_cols]).to(model.device)
    inter = c.intermediate_size // world
    mlp = torch.arange(rank * inter, (rank + 1) * inter)
    gate_up_cols = torch.cat([mlp, c.intermediate_size + mlp]).to(model.device)
    rows = slice(rank * heads * d, (rank + 1) * heads * d)
    for layer in model.layers:
        layer.wqkv = layer.wqkv[:, qkv_cols].contiguous()
        layer.wo = layer.wo[rows].contiguous()
        layer.w_gate_up = layer.w_gate_up[:, gate_up_cols].contiguous()
        layer.w_down = layer.w_down[rank * inter:(rank + 1) * inter].contiguous()
    model.num_heads = heads
    model.num_kv_heads = kv_end - kv_first
    model.all_reduce = all_reduce
    return model
