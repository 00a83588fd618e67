"""A tiny Llama-style transformer with random weights and a paged KV cache.

Architecture as in Llama 3 (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU MLP), at a size that runs on a laptop CPU. Weights come from a seed, so there
is nothing to download and the same seed always gives the same model.

The trunk (embeddings, projections, MLP, norms) runs over every token of a step at
once; only attention differs between the two ways of running the model:

* ``forward_full``: the plain, cache-free forward over one whole sequence. It is the
  oracle the paged path is tested against;
* ``forward_paged``: tokens of many sequences in one flat batch, K/V written into a
  block-paged cache and read back through each sequence's block table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from reference_engine.tokenizer import VOCAB_SIZE


@dataclass(frozen=True)
class TinyLlamaConfig:
    vocab_size: int = VOCAB_SIZE
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 352
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    # Spread of the output logits. Random weights give near-uniform logits otherwise,
    # and near ties would make greedy output hinge on rounding.
    logit_scale: float = 4.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "intermediate_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads "
                             f"({self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be divisible by num_kv_heads "
                             f"({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for rotary embeddings")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


# Built-in models, selectable by name (`--model tiny-llama`).
MODEL_PRESETS: dict[str, TinyLlamaConfig] = {
    "tiny-llama": TinyLlamaConfig(),
    "tiny-llama-4l": TinyLlamaConfig(hidden_size=256, num_layers=4, num_heads=8,
                                     num_kv_heads=2, intermediate_size=704),
}


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor   # [hidden]
    wqkv: torch.Tensor        # [hidden, (heads + 2 * kv_heads) * head_dim]
    wo: torch.Tensor          # [heads * head_dim, hidden]
    mlp_norm: torch.Tensor    # [hidden]
    w_gate_up: torch.Tensor   # [hidden, 2 * intermediate]
    w_down: torch.Tensor      # [intermediate, hidden]


@dataclass
class PagedAttentionPlan:
    """How one step's flat token batch maps onto sequences and cache slots (all layers)."""

    slots: torch.Tensor                       # [tokens] cache slot each new token's K/V goes to
    decode_rows: torch.Tensor | None          # [B] token rows that are single-token decodes
    decode_key_slots: torch.Tensor | None     # [B, L] slots of each decode's context, padded
    decode_key_mask: torch.Tensor | None      # [B, 1, 1, L] True where the slot is real context
    prefills: list[tuple[int, int, torch.Tensor, torch.Tensor]]
    # per prefill chunk: (first row, last row + 1, key slots [L], causal mask [n, L])


AttentionFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class TinyLlama:
    def __init__(self, config: TinyLlamaConfig, seed: int = 0,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        # Initialise in float64 on the CPU so a seed means the same model on every device
        # and dtype, then convert once.
        g = torch.Generator(device="cpu").manual_seed(seed)
        c = config

        def init(*shape: int, std: float) -> torch.Tensor:
            w = torch.randn(*shape, generator=g, dtype=torch.float64) * std
            return w.to(device=self.device, dtype=dtype)

        def ones(n: int) -> torch.Tensor:
            return torch.ones(n, device=self.device, dtype=dtype)

        qkv_out = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
        self.embed = init(c.vocab_size, c.hidden_size, std=1.0)
        self.layers = [
            LayerWeights(
                attn_norm=ones(c.hidden_size),
                wqkv=init(c.hidden_size, qkv_out, std=c.hidden_size ** -0.5),
                wo=init(c.num_heads * c.head_dim, c.hidden_size, std=c.hidden_size ** -0.5),
                mlp_norm=ones(c.hidden_size),
                w_gate_up=init(c.hidden_size, 2 * c.intermediate_size, std=c.hidden_size ** -0.5),
                w_down=init(c.intermediate_size, c.hidden_size, std=c.intermediate_size ** -0.5),
            )
            for _ in range(c.num_layers)
        ]
        self.final_norm = ones(c.hidden_size)
        self.lm_head = init(c.hidden_size, c.vocab_size, std=c.logit_scale * c.hidden_size ** -0.5)
        self.inv_freq = 1.0 / (c.rope_theta ** (
            torch.arange(0, c.head_dim, 2, dtype=torch.float64, device=self.device) / c.head_dim))
        # The heads this instance computes and how its partial outputs are summed. A whole
        # model computes every head and sums nothing; a tensor-parallel shard
        # (reference_engine/parallel/sharding.py) narrows the heads and MLP columns and
        # all-reduces the row-parallel outputs (o_proj, down_proj) across its ranks.
        self.num_heads = c.num_heads
        self.num_kv_heads = c.num_kv_heads
        self.all_reduce: Callable[[torch.Tensor], torch.Tensor] = _unreduced

    def weight_bytes(self) -> int:
        tensors = [self.embed, self.final_norm, self.lm_head]
        for layer in self.layers:
            tensors += [layer.attn_norm, layer.wqkv, layer.wo, layer.mlp_norm,
                        layer.w_gate_up, layer.w_down]
        return sum(t.numel() * t.element_size() for t in tensors)

    # -- the shared trunk -------------------------------------------------------------

    def hidden_states(self, token_ids: torch.Tensor, positions: torch.Tensor,
                      attend: AttentionFn) -> torch.Tensor:
        """Final-normed hidden states [tokens, hidden]; ``attend(layer, q, k, v)`` does attention."""
        c = self.config
        heads, kv_heads = self.num_heads, self.num_kv_heads
        cos, sin = self.rope_tables(positions)
        x = self.embed[token_ids]
        for index, layer in enumerate(self.layers):
            h = _rms_norm(x, layer.attn_norm, c.rms_norm_eps) @ layer.wqkv
            q, k, v = h.split([heads * c.head_dim, kv_heads * c.head_dim,
                               kv_heads * c.head_dim], dim=-1)
            q = apply_rope(q.view(-1, heads, c.head_dim), cos, sin)
            k = apply_rope(k.view(-1, kv_heads, c.head_dim), cos, sin)
            v = v.view(-1, kv_heads, c.head_dim)
            attn = attend(index, q, k, v).reshape(-1, heads * c.head_dim) @ layer.wo
            x = x + self.all_reduce(attn)
            gate, up = (_rms_norm(x, layer.mlp_norm, c.rms_norm_eps) @ layer.w_gate_up).chunk(2, -1)
            x = x + self.all_reduce((F.silu(gate) * up) @ layer.w_down)
        return _rms_norm(x, self.final_norm, c.rms_norm_eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.lm_head

    def rope_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)[:, None, :]  # [tokens, 1, head_dim]
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    # -- the oracle: whole sequence, no cache -----------------------------------------

    def forward_full(self, token_ids: list[int]) -> torch.Tensor:
        """Logits [len, vocab] for every position of one sequence, recomputed from scratch."""
        ids = torch.tensor(token_ids, device=self.device)
        positions = torch.arange(len(token_ids), device=self.device)

        def attend(_: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None], self._expand_kv(k).transpose(0, 1)[None],
                self._expand_kv(v).transpose(0, 1)[None], is_causal=True)
            return out[0].transpose(0, 1)

        return self.logits(self.hidden_states(ids, positions, attend))

    # -- the engine path: flat multi-sequence batch over a paged cache ----------------

    def forward_paged(self, token_ids: torch.Tensor, positions: torch.Tensor,
                      plan: PagedAttentionPlan, cache: PagedKVCache) -> torch.Tensor:
        """Hidden states [tokens, hidden]; writes every token's K/V into ``cache`` first."""

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            k_flat, v_flat = cache.flat(layer)
            k_flat[plan.slots] = k
            v_flat[plan.slots] = v
            out = torch.empty_like(q)
            if plan.decode_rows is not None:
                # One query per head: fold each kv head's query group into the "query
                # length" axis, so the keys are read once per kv head, never copied per head.
                c = self.config
                group = self.num_heads // self.num_kv_heads
                q_dec = q[plan.decode_rows].view(-1, self.num_kv_heads, group, c.head_dim)
                o = F.scaled_dot_product_attention(
                    q_dec,                                                   # [B, KV, G, D]
                    k_flat[plan.decode_key_slots].transpose(1, 2),          # [B, KV, L, D]
                    v_flat[plan.decode_key_slots].transpose(1, 2),
                    attn_mask=plan.decode_key_mask)                         # [B, 1, 1, L]
                out[plan.decode_rows] = o.reshape(-1, self.num_heads, c.head_dim)
            for first, end, key_slots, mask in plan.prefills:
                o = F.scaled_dot_product_attention(
                    q[first:end].transpose(0, 1)[None],
                    self._expand_kv(k_flat[key_slots]).transpose(0, 1)[None],
                    self._expand_kv(v_flat[key_slots]).transpose(0, 1)[None],
                    attn_mask=mask)
                out[first:end] = o[0].transpose(0, 1)
            return out

        return self.hidden_states(token_ids, positions, attend)

    def _expand_kv(self, t: torch.Tensor) -> torch.Tensor:
        # GQA: query head h reads kv head h // (heads / kv_heads).
        return t.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)


class PagedKVCache:
    """Per layer, K and V of shape [num_blocks, block_size, kv_heads, head_dim].

    Owned by the torch executor. Which blocks belong to which sequence is the block
    pool's business; the cache only stores values at the slots it is told to.
    """

    def __init__(self, config: TinyLlamaConfig, num_blocks: int, block_size: int,
                 device: torch.device, dtype: torch.dtype, num_kv_heads: int | None = None,
                 ) -> None:
        # num_kv_heads: the heads this rank holds (a tensor-parallel shard holds fewer).
        kv_heads = config.num_kv_heads if num_kv_heads is None else num_kv_heads
        shape = (num_blocks, block_size, kv_heads, config.head_dim)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot-indexed views [num_blocks * block_size, kv_heads, head_dim] of one layer."""
        k, v = self.k[layer], self.v[layer]
        return k.view(-1, *k.shape[2:]), v.view(-1, *v.shape[2:])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    @staticmethod
    def bytes_per_block(config: TinyLlamaConfig, block_size: int, dtype: torch.dtype,
                        num_kv_heads: int | None = None) -> int:
        element = torch.tensor([], dtype=dtype).element_size()
        kv_heads = config.num_kv_heads if num_kv_heads is None else num_kv_heads
        return 2 * config.num_layers * block_size * kv_heads * config.head_dim * element


def _unreduced(partial: torch.Tensor) -> torch.Tensor:
    return partial


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin

