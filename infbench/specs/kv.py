"""KV-cache arithmetic: bytes per token, per sequence, per GPU, and block counts.

GQA stores K and V for each KV head: 2 x kv_heads x head_dim elements per layer per token.
MLA (DeepSeek-V2/V3) stores one compressed latent plus the shared RoPE key:
kv_lora_rank + qk_rope_head_dim elements per layer per token, and since every rank needs
the whole latent, the cache is replicated on every TP rank rather than split.
Sliding-window layers keep at most `window` tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infbench.specs.errors import SpecError
from infbench.specs.formats import FormatSpec, get_format
from infbench.specs.models import ModelSpec
from infbench.specs.parallel import check_tp, kv_heads_per_gpu


@dataclass(frozen=True)
class KvLayout:
    """Per-GPU KV cost of one model at one TP degree and format; cheap to query."""

    attention: str  # "MLA", "MHA", "GQA" or "MQA"
    elements_per_token_per_layer: int  # whole model, before TP
    elements_per_token_per_layer_per_gpu: int
    bytes_per_element: float
    replication: int  # ranks holding a copy of each cached element (1 = perfectly split)
    # (window, number of layers) for each window size; window None = full attention
    layer_groups: tuple[tuple[int | None, int], ...]
    num_layers: int
    tp: int

    @property
    def bytes_per_token_per_layer_per_gpu(self) -> float:
        return self.elements_per_token_per_layer_per_gpu * self.bytes_per_element

    @property
    def bytes_per_token(self) -> float:
        """Whole model (all layers, one copy), as the model card quotes it."""
        return self.elements_per_token_per_layer * self.bytes_per_element * self.num_layers

    @property
    def bytes_per_token_per_gpu(self) -> float:
        """Every layer charged the full context; what one block slot costs."""
        return self.bytes_per_token_per_layer_per_gpu * self.num_layers

    def layer_tokens(self, context: int) -> int:
        """Sum over layers of the tokens each layer keeps for a sequence of `context`."""
        return sum(n * (context if w is None else min(context, w)) for w, n in self.layer_groups)

    def bytes_per_sequence_per_gpu(self, context: int) -> float:
        return self.layer_tokens(context) * self.bytes_per_token_per_layer_per_gpu


def kv_layout(model: ModelSpec, tp: int = 1, kv_format: str | FormatSpec = "bf16") -> KvLayout:
    check_tp(model, tp)
    fmt = get_format(kv_format)
    groups: dict[int | None, int] = {}
    for w in model.layer_windows:
        groups[w] = groups.get(w, 0) + 1
    if model.mla is not None:
        per_layer = model.mla.cache_elements_per_token_per_layer
        attention, per_gpu, replication = "MLA", per_layer, tp
    else:
        per_layer = 2 * model.num_kv_heads * model.head_dim
        per_gpu = 2 * kv_heads_per_gpu(model, tp) * model.head_dim
        replication = max(1, tp // model.num_kv_heads)
        if model.num_kv_heads == model.num_attention_heads:
            attention = "MHA"
        elif model.num_kv_heads == 1:
            attention = "MQA"
        else:
            attention = "GQA"
    return KvLayout(
        attention=attention,
        elements_per_token_per_layer=per_layer,
        elements_per_token_per_layer_per_gpu=per_gpu,
        bytes_per_element=fmt.bytes_per_element,
        replication=replication,
        layer_groups=tuple(sorted(groups.items(), key=lambda g: (g[0] is not None, g[0] or 0))),
        num_layers=model.num_layers,
        tp=tp,
    )


@dataclass(frozen=True)
class KvReport:
    model: str
    tp: int
    kv_format: str
    attention: str
    num_layers: int
    sliding_layers: int
    window: int | None
    elements_per_token_per_layer: int
    bytes_per_element: float
    bytes_per_token: float  # whole model, one copy
    kv_heads_per_gpu: int | None  # None for MLA (one latent, not heads)
    replication: int
    bytes_per_token_per_gpu: float
    context: int
    bytes_per_sequence: float  # whole model, one copy, windows applied
    bytes_per_sequence_per_gpu: float
    bytes_per_sequence_all_gpus: float  # what the TP group holds, duplicates included
    block_size: int
    bytes_per_block_per_gpu: float
    blocks_per_sequence: int
    waste_tokens: int  # unused slots in this sequence's last block
    waste_bound_tokens: int  # any sequence wastes at most block_size - 1 slots
    waste_bound_bytes_per_gpu: float


def kv_report(
    model: ModelSpec,
    tp: int = 1,
    kv_format: str | FormatSpec = "bf16",
    context: int = 8192,
    block_size: int = 16,
) -> KvReport:
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise SpecError(f"context must be a positive integer, got {context!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise SpecError(f"block_size must be a positive integer, got {block_size!r}")
    lay = kv_layout(model, tp, kv_format)
    windows = [w for w, _ in lay.layer_groups if w is not None]
    sliding = sum(n for w, n in lay.layer_groups if w is not None)
    per_gpu_seq = lay.bytes_per_sequence_per_gpu(context)
    one_copy_seq = (
        lay.layer_tokens(context) * lay.elements_per_token_per_layer * lay.bytes_per_element
    )
    # A block table covers the longest-lived layer group; sliding groups free older blocks.
    longest = max(context if w is None else min(context, w) for w, _ in lay.layer_groups)
    blocks = math.ceil(longest / block_size)
    return KvReport(
        model=model.name,
        tp=tp,
        kv_format=get_format(kv_format).name,
        attention=lay.attention,
        num_layers=lay.num_layers,
        sliding_layers=sliding,
        window=min(windows) if windows else None,
        elements_per_token_per_layer=lay.elements_per_token_per_layer,
        bytes_per_element=lay.bytes_per_element,
        bytes_per_token=lay.bytes_per_token,
        kv_heads_per_gpu=None if model.mla else kv_heads_per_gpu(model, tp),
        replication=lay.replication,
        bytes_per_token_per_gpu=lay.bytes_per_token_per_gpu,
        context=context,
        bytes_per_sequence=one_copy_seq,
        bytes_per_sequence_per_gpu=per_gpu_seq,
        bytes_per_sequence_all_gpus=per_gpu_seq * tp,
        block_size=block_size,
        bytes_per_block_per_gpu=lay.bytes_per_token_per_gpu * block_size,
        blocks_per_sequence=blocks,
        waste_tokens=blocks * block_size - longest,
        waste_bound_tokens=block_size - 1,
        # Each layer group (full, each window) has its own last block, so the bound is
        # block_size - 1 slots in every layer.
        waste_bound_bytes_per_gpu=(block_size - 1) * lay.bytes_per_token_per_gpu,
    )
