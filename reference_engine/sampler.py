"""Next-token sampling: greedy, temperature and top-p, reproducible per sequence.

Determinism rules a client can rely on:

* temperature 0 is argmax, and a tie goes to the lowest token id;
* top-p keeps the smallest set of most likely tokens whose mass reaches ``top_p``,
  plus every token tied with the last one admitted, so the kept set depends only on
  the probabilities, never on how a sort ordered equal values; ``top_p = 1`` keeps
  every token;
* a seeded request draws its k-th token from a generator derived from (seed, k)
  alone, so its output does not depend on which other sequences share the step, nor
  on whether it was preempted and recomputed in between.

Sampling happens in float64 on the CPU: the rows are tiny (one per sequence) and it
keeps seeded output identical between CPU and CUDA runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reference_engine.request import SamplingParams

_MASK64 = (1 << 64) - 1


def seeded_generator(seed: int, num_output_tokens: int) -> torch.Generator:
    """The generator for a seeded sequence's next token (the ``num_output_tokens``-th)."""
    generator = torch.Generator(device="cpu")
    generator.manual_seed(_mix(seed, num_output_tokens))
    return generator


def _mix(seed: int, counter: int) -> int:
    # splitmix64 finaliser over (seed, counter): neighbouring seeds and counters give
    # unrelated streams, which seeding with seed + counter would not.
    z = (seed * 0x9E3779B97F4A7C15 + counter * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) & ((1 << 63) - 1)


def greedy(logits_row: torch.Tensor) -> int:
    """Argmax with ties to the lowest token id."""
    best = logits_row.max()
    return int(torch.nonzero(logits_row == best)[0, 0])


def nucleus_mask(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Boolean mask of the tokens top-p keeps (see the module docstring)."""
    if top_p >= 1.0:
        return torch.ones_like(probs, dtype=torch.bool)
    sorted_probs, _ = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=0) - sorted_probs
    num_kept = max(1, int((mass_before < top_p).sum()))
    threshold = sorted_probs[num_kept - 1]
    return probs >= threshold


def sample(
    logits_row: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> int:
    """Sample one token id from one row of logits (shape [vocab])."""
    row = logits_row.detach().to(device="cpu", dtype=torch.float64)
    if torch.isnan(row).any():
        raise ValueError("logits contain NaN: the model output is invalid")
    if params.temperature == 0.0:
        return greedy(row)
    probs = torch.softmax(row / params.temperature, dim=0)
    probs = torch.where(nucleus_mask(probs, params.top_p), probs, 0.0)
    # Inverse CDF in token-id order: one uniform draw per token, so a derived
    # generator gives the same token for the same (seed, position).
    cdf = torch.cumsum(probs, dim=0)
    u = torch.rand((), generator=generator, dtype=torch.float64) * cdf[-1]
    index = int(torch.searchsorted(cdf, u.reshape(1), right=True)[0])
    # Float rounding can put u at cdf[-1]; fall back to the last token with mass.
    if index >= probs.numel():
        index = int(torch.nonzero(probs)[-1, 0])
    return index


def sample_batch(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
) -> list[int]:
    """Sample one token per row of ``logits`` ([rows, vocab]); greedy rows in one argmax."""
    if logits.shape[0] != len(params) or len(params) != len(generators):
        raise ValueError("sample_batch needs one SamplingParams and one generator per row")
    rows = logits.detach().to(device="cpu", dtype=torch.float64)
    if torch.isnan(rows).any():
        raise ValueError("logits contain NaN: the model output is invalid")
    out = [0] * len(params)
    greedy_rows = [i for i, p in enumerate(params) if p.temperature == 0.0]
    if greedy_rows:
        picked = rows[greedy_rows]
        # argmax returns the first maximal index, i.e. the lowest token id on a tie.
        for i, token in zip(greedy_rows, picked.argmax(dim=1).tolist(), strict=True):
            out[i] = token
    for i, p in enumerate(params):
        if p.temperature != 0.0:
            out[i] = sample(rows[i], p, generators[i])
    return out
