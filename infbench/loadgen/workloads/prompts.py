"""Prompt text with a target token count for the target's tokenizer.

infbench cannot load every tokenizer, so it measures: preflight sends two probe prompts of
known word counts and reads `usage.prompt_tokens` back, which gives tokens per word and the
fixed overhead (BOS, chat template). Prompts are random common English words, each of which
is one token in the usual BPE vocabularies, so the ratio is stable across lengths. The
request rows record the server's own prompt_tokens, so any residual error is visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WORDS = ["the", "of", "and", "to", "in", "is", "was", "for", "that", "with", "as", "on", "by", "at", "from", "his", "her", "they", "this", "had", "not", "are", "but", "which", "have", "one", "were", "all", "their", "there", "been", "has", "when", "who", "will", "more", "if", "no", "out", "so", "said", "what", "up", "its", "about", "into", "than", "them", "can", "only", "other", "new", "some", "time", "could", "these", "two", "may", "then", "first", "any", "like", "now", "my", "over", "such", "our", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years", "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three"]


@dataclass(frozen=True)
class TokenModel:
    """prompt_tokens ≈ overhead + per_word × words, measured against the target."""

    per_word: float = 1.0
    overhead: float = 0.0
    source: str = "assumed"  # assumed | measured

    def words_for(self, tokens: float, *, with_overhead: bool = True) -> int:
        body = tokens - (self.overhead if with_overhead else 0.0)
        return max(1, round(body / self.per_word))

    @classmethod
    def from_probes(cls, words: tuple[int, int], tokens: tuple[int, int]) -> TokenModel:
        (w1, w2), (t1, t2) = words, tokens
        if w2 == w1 or t2 <= t1:
            raise ValueError("token calibration: probe prompts gave no usable token counts")
        per_word = (t2 - t1) / (w2 - w1)
        return cls(per_word=per_word, overhead=max(0.0, t1 - per_word * w1), source="measured")


_SPACED = [" " + w for w in WORDS]


def random_words(rng: np.random.Generator, n: int) -> str:
    # Joining Python strings by index is several times cheaper than joining NumPy str_ items,
    # and this runs once per request on the client's event loop.
    spaced = _SPACED
    return "".join([spaced[i] for i in rng.integers(0, len(spaced), n).tolist()]).lstrip()


def make_prompt(rng: np.random.Generator, model: TokenModel, tokens: int) -> str:
    return random_words(rng, model.words_for(tokens))
