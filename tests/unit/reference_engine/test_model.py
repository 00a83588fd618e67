from __future__ import annotations

import pytest
import torch

from reference_engine.model import (
    MODEL_PRESETS,
    PagedAttentionPlan,
    PagedKVCache,
    TinyLlama,
    TinyLlamaConfig,
    apply_rope,
)

CONFIG = MODEL_PRESETS["tiny-llama"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rotary_embedding_scores_depend_only_on_relative_position(seed: int) -> None:
    model = TinyLlama(CONFIG, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, CONFIG.head_dim, dtype=torch.float64, generator=gen)
    k = torch.randn(1, 1, CONFIG.head_dim, dtype=torch.float64, generator=gen)

    def score(q_pos: int, k_pos: int) -> float:
        cos_q, sin_q = model.rope_tables(torch.tensor([q_pos]))
        cos_k, sin_k = model.rope_tables(torch.tensor([k_pos]))
        return float((apply_rope(q, cos_q, sin_q) * apply_rope(k, cos_k, sin_k)).sum())

    for shift in (1, 97, 1000):
        for rel in (0, 3, 11):
            assert score(7 + rel + shift, 7 + shift) == pytest.approx(score(7 + rel, 7), rel=1e-9)
    # ...and on the relative position: over eight distances the scores are (all but by a
    # chance near-coincidence of two of them, round Q10: 0.04% apart) different
    by_distance = [score(20 + d, 20) for d in range(8)]
    distinct = {round(x / max(abs(y) for y in by_distance), 6) for x in by_distance}
    assert len(distinct) >= 7, by_distance


def test_full_forward_is_causal() -> None:
    model = TinyLlama(CONFIG, seed=1)
    base = model.forward_full([1, 2, 3, 4, 5])
    changed_tail = model.forward_full([1, 2, 3, 9, 9])
    assert torch.equal(base[:3], changed_tail[:3])
    assert not torch.allclose(base[3:], changed_tail[3:])


def test_paged_forward_over_a_scattered_block_table_matches_the_full_forward() -> None:
    model = TinyLlama(CONFIG, seed=2, dtype=torch.float64)
    block_size, table = 4, [6, 1, 4]  # deliberately out of order
    cache = PagedKVCache(CONFIG, num_blocks=8, block_size=block_size, device=model.device,
                         dtype=torch.float64)
    ids = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]

    def chunk(start: int, end: int) -> torch.Tensor:
        pos = torch.arange(end)
        slots = torch.tensor(table)[pos // block_size] * block_size + pos % block_size
        mask = pos[None, :] <= torch.arange(start, end)[:, None]
        plan = PagedAttentionPlan(slots[start:], None, None, None, [(0, end - start, slots, mask)])
        return model.forward_paged(torch.tensor(ids[start:end]), torch.arange(start, end), plan,
                                   cache)

    # Two prefill chunks, the second reading the first one's K/V from the cache.
    hidden = torch.cat([chunk(0, 6), chunk(6, 10)])
    torch.testing.assert_close(model.logits(hidden), model.forward_full(ids))


def test_weight_bytes_count_every_parameter() -> None:
    c = TinyLlamaConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                        intermediate_size=48)
    params = (c.vocab_size * 32 * 2 + 32  # embed, lm_head, final norm
              + 32 * (2 + 2 * 1) * 16 + 32 * 32 + 2 * 32 + 32 * 96 + 48 * 32)
    assert TinyLlama(c).weight_bytes() == params * 4


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"hidden_size": 100, "num_heads": 3}, "hidden_size"),
        ({"num_heads": 4, "num_kv_heads": 3}, "num_heads"),
        ({"hidden_size": 12, "num_heads": 4, "num_kv_heads": 1}, "head_dim"),
        ({"num_layers": 0}, "num_layers"),
    ],
)
def test_inconsistent_shapes_are_rejected_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TinyLlamaConfig(**kwargs)
