"""Speculative decoding: an n-gram (prompt lookup) drafter, verification, and its counters.

Enabled by `speculative_config` (vLLM's `--speculative-config` JSON):
`{"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": N1,
"prompt_lookup_max": N2}`. When only one of the two lookup bounds is given the other takes
its value; with neither both are 5 (vLLM's rule). `sim_draft_ms` (this engine's own key) is
the time one draft position costs the sim executor per step that drafts: 0 for the n-gram
lookup (host work beside the device step), a draft model's forward pass otherwise
(`"method": "draft_model"`, sim executor only, drafts found by the same lookup).

Per decoding sequence and step: the drafter looks for the longest suffix of the sequence
(between `prompt_lookup_max` and `prompt_lookup_min` tokens) that occurred earlier in its
prompt or output, and proposes up to K tokens that followed the earliest such occurrence.
The scheduler sends the last sampled token plus the drafts as one chunk of K+1 tokens; the
executor returns the target's greedy token after each of the K+1 positions; a draft is
accepted while it equals the target's token before it (a prefix match), and the target's
token after the last accepted draft is kept as the bonus token. So a step yields between 1
and K+1 tokens and the output is the one greedy decoding gives without speculation.
Speculation applies to greedy requests (temperature 0) only: this engine has no rejection
sampler, and a sampled request decodes one token per step as before, as does a structured
one (its grammar mask is applied one token at a time).

Counters, with vLLM's names and meaning, observed before end-of-sequence and stop checks
cut a step's tokens (as vLLM's scheduler counts them): drafts (sequence-steps that carried
at least one draft), draft tokens, accepted draft tokens (the bonus token not included), and
accepted tokens per draft position. They live in the engine process, so they restart from
zero with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from reference_engine.block_pool import InvariantError
from reference_engine.request import Sequence

METHODS = ("ngram", "draft_model")
_KEYS = {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
         "sim_draft_ms"}


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    prompt_lookup_min: int
    prompt_lookup_max: int
    sim_draft_ms: float

    @classmethod
    def parse(cls, value: dict[str, Any] | str) -> SpeculativeConfig:
        """From the JSON object (or its text); ValueError naming the field otherwise."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"speculative_config is not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise ValueError("speculative_config must be a JSON object, e.g. "
                             '{"method": "ngram", "num_speculative_tokens": 3}')
        unknown = sorted(set(value) - _KEYS)
        if unknown:
            raise ValueError(f"speculative_config: unknown key {unknown[0]!r} "
                             f"(known: {', '.join(sorted(_KEYS))})")
        method = value.get("method")
        if method not in METHODS:
            raise ValueError(f"speculative_config: method must be one of {', '.join(METHODS)}, "
                             f"got {method!r}")
        # JSON values, checked below to be positive integers
        k: Any = value.get("num_speculative_tokens")
        bounds: tuple[Any, Any] = (value.get("prompt_lookup_min"), value.get("prompt_lookup_max"))
        lo, hi = bounds
        lo, hi = (5, 5) if lo is None and hi is None else (lo if lo is not None else hi,
                                                           hi if hi is not None else lo)
        for name, v in (("num_speculative_tokens", k), ("prompt_lookup_min", lo),
                        ("prompt_lookup_max", hi)):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"speculative_config: {name} must be a positive integer, "
                                 f"got {v!r}")
        if lo > hi:
            raise ValueError(f"speculative_config: prompt_lookup_min ({lo}) > "
                             f"prompt_lookup_max ({hi})")
        draft_ms = value.get("sim_draft_ms", 0.0)
        if (not isinstance(draft_ms, (int, float)) or isinstance(draft_ms, bool)
                or not 0.0 <= draft_ms < float("inf")):
            raise ValueError(f"speculative_config: sim_draft_ms must be a number >= 0, "
                             f"got {draft_ms!r}")
        return cls(method, k, lo, hi, float(draft_ms))


@dataclass(frozen=True)
class SpecCounters:
    """One consistent snapshot (replaced whole after each step, read by /metrics)."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = ()


def as_text(tokens: list[int]) -> str:
    # One code point per token id: str.find then matches whole tokens, never half of one.
    return "".join(map(chr, tokens))


def earliest_match(text: str, lo: int, hi: int, k: int) -> str:
    """The up to k tokens that followed the earliest earlier occurrence of the longest
    suffix of `text` of lo..hi tokens ("" when no such suffix occurred before)."""
    n_text = len(text)
    for n in range(min(hi, n_text - 1), lo - 1, -1):
        i = text.find(text[n_text - n:], 0, n_text - 1)
        if i >= 0:
            return text[i + n:i + n + k]
    return ""


@dataclass
class SpecDecoder:
    """Owned by the scheduler (engine thread). Owns: each live sequence's context as text
    (`_text`, appended as the sequence grows, dropped when it finishes) and the counters."""

    config: SpeculativeConfig
    _text: dict[int, str] = field(default_factory=dict)
    counters: SpecCounters = field(default_factory=SpecCounters)

    def __post_init__(self) -> None:
        self.counters = SpecCounters(accepted_per_pos=(0,) * self.config.num_speculative_tokens)

    def propose(self, seq: Sequence, budget: int) -> list[int]:
        """Draft tokens for seq's next decode step, within the step's token budget (the
        sampled token takes one) and the tokens the sequence may still produce."""
        # A structured request's tokens pass its grammar mask one at a time
        # (structured_output.py): it decodes without drafts.
        if seq.params.temperature != 0.0 or getattr(seq.params, "structured_outputs", None):
            return []
        toks = seq.token_ids
        room = min(self.config.num_speculative_tokens, budget - 1, seq.max_len - len(toks) - 1)
        if room <= 0:
            return []
        text = self._text.get(seq.seq_id, "")
        if len(text) < len(toks):
            text += as_text(toks[len(text):])
            self._text[seq.seq_id] = text
        found = earliest_match(text, self.config.prompt_lookup_min,
                               self.config.prompt_lookup_max, room)
        return [ord(c) for c in found]

    def accept(self, drafts: list[int], verified: list[int]) -> list[int]:
        """The tokens a verified step yields: the accepted drafts and the bonus token."""
        if len(verified) != len(drafts) + 1:
            raise ValueError(f"verification returned {len(verified)} tokens for "
                             f"{len(drafts)} drafts (expected drafts + 1)")
        a = 0
        while a < len(drafts) and drafts[a] == verified[a]:
            a += 1
        c = self.counters
        per_pos = list(c.accepted_per_pos)
        for i in range(a):
            per_pos[i] += 1
        self.counters = SpecCounters(c.num_drafts + 1, c.num_draft_tokens + len(drafts),
                                     c.num_accepted_tokens + a, tuple(per_pos))
        return verified[:a + 1]

    def forget(self, seq: Sequence) -> None:
        """The sequence finished or was aborted: its context text is no longer needed."""
        self._text.pop(seq.seq_id, None)

    def check_invariants(self, live_ids: set[int]) -> None:
        stale = set(self._text) - live_ids
        if stale:
            raise InvariantError(f"drafter holds context of finished sequences {sorted(stale)}")
        c = self.counters
        if sum(c.accepted_per_pos) != c.num_accepted_tokens:
            raise InvariantError("accepted tokens per position do not sum to accepted tokens")
        if c.num_accepted_tokens > c.num_draft_tokens or any(
                a < b for a, b in zip(c.accepted_per_pos, c.accepted_per_pos[1:], strict=False)):
            raise InvariantError("more tokens accepted at a later draft position than an earlier")
