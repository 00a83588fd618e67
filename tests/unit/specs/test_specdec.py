"""Speculative decoding on the roofline (infbench.specs.specdec): tokens per step from α
and K, and the batch size from which verifying K+1 tokens per sequence costs throughput."""

from __future__ import annotations

import pytest

from infbench.specs import get_gpu, get_model
from infbench.specs.errors import SpecError
from infbench.specs.roofline import step_time
from infbench.specs.specdec import expected_tokens, plan_specdec


@pytest.mark.parametrize("alpha,k,tokens", [(0.0, 5, 1.0), (1.0, 3, 4.0), (0.5, 2, 1.75),
                                            (0.8, 4, 1 + 0.8 + 0.64 + 0.512 + 0.4096)])
def test_expected_tokens_is_the_geometric_sum(alpha: float, k: int, tokens: float) -> None:
    assert expected_tokens(alpha, k) == pytest.approx(tokens, rel=1e-12)


def test_bad_acceptance_is_refused() -> None:
    with pytest.raises(SpecError, match="acceptance: 1.2 is not in"):
        expected_tokens(1.2, 3)


@pytest.mark.parametrize("model,gpu,alpha,k,context", [
    ("Qwen/Qwen2.5-3B", "A100-80GB-SXM", 0.66, 5, 600),
    ("meta-llama/Llama-3.1-8B", "L40S", 0.45, 3, 300),
])
def test_speedup_is_e_while_weight_bound_and_falls_below_one_when_compute_bound(
        model: str, gpu: str, alpha: float, k: int, context: int) -> None:
    m, g = get_model(model), get_gpu(gpu)
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    p = plan_specdec(m, g, alpha=alpha, k=k, context=context, batches=batches)
    first = p.rows[0]
    assert first.speedup == pytest.approx(expected_tokens(alpha, k), rel=0.02)
    ratios = [r.speedup for r in p.rows]
    assert all(a >= b - 1e-9 for a, b in zip(ratios, ratios[1:], strict=False))
    assert p.costs_above is not None and p.costs_above > 8
    # the crossover is where E * t_plain = t_spec, from the roofline's own step times
    b = p.costs_above
    plain = step_time(m, g, decode_contexts=[context + 1] * b).seconds
    spec = step_time(m, g, prefill_chunks=[(k + 1, context)] * b).seconds
    assert expected_tokens(alpha, k) * plain < spec
    below = p.rows[[r.batch for r in p.rows].index(b) - 1]
    assert below.speedup >= 1.0
    # fewer drafts are best once the step is compute-bound
    assert p.rows[-1].best_k < p.rows[0].best_k


def test_long_contexts_keep_speculation_paying() -> None:
    # At 3000 tokens of context each sequence's KV read dominates the step, and verification
    # reads it once for K+1 tokens: no batch size given makes speculation cost throughput.
    p = plan_specdec(get_model("meta-llama/Llama-3.1-8B"), get_gpu("L40S"), alpha=0.45, k=3,
                     context=3000, batches=[1, 64, 1024])
    assert p.costs_above is None and min(r.speedup for r in p.rows) > 1.5


def test_a_draft_model_cost_moves_the_crossover_down() -> None:
    m, g = get_model("Qwen/Qwen2.5-3B"), get_gpu("A100-80GB-SXM")
    batches = list(range(1, 257, 4))
    free = plan_specdec(m, g, alpha=0.7, k=4, context=800, batches=batches)
    drafted = plan_specdec(m, g, alpha=0.7, k=4, context=800, batches=batches, draft_s=0.6e-3)
    assert drafted.costs_above < free.costs_above
    assert drafted.rows[0].spec_step_s == pytest.approx(free.rows[0].spec_step_s + 4 * 0.6e-3)
