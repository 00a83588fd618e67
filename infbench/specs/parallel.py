"""Tensor-parallel checks shared by every calculator."""

from __future__ import annotations

from infbench.specs.errors import SpecError
from infbench.specs.models import ModelSpec


def check_tp(model: ModelSpec, tp: int) -> int:
    """Validate a TP degree the way vLLM does; return it."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise SpecError(f"tp must be a positive integer, got {tp!r}")
    heads = model.num_attention_heads
    if heads % tp:
        raise SpecError(f"tp={tp} does not divide num_attention_heads={heads} of {model.name}")
    kv = model.num_kv_heads
    if model.mla is None and (kv % tp if tp <= kv else tp % kv):
        raise SpecError(
            f"tp={tp} and num_key_value_heads={kv} of {model.name}: one must divide the other"
        )
    return tp


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each rank stores; beyond tp = num_kv_heads every rank keeps a whole head,
    so heads are duplicated tp / num_kv_heads times."""
    return max(1, model.num_kv_heads // tp)
