"""Prompt text with a target token count for the target's tokenizer.

infbench cannot load every tokenizer, so it measures (`loadgen.calibrate`): a linear model

    prompt_tokens = overhead + per_word * words + per_letter * letters

(letters: the UTF-8 bytes that are not whitespace) fitted to counts the target gave for probe
texts, from its `/tokenize` where it has one (exact) or from `usage.prompt_tokens` otherwise.
Both usual kinds of vocabulary are linear in these terms: a BPE vocabulary in which each of
the common English words below is one token (per_word 1), and a byte vocabulary (per_word 1
for the space, per_letter 1). Prompts are random words from that list, and `fit` chooses how
many, and which lengths at the end, so the model's count lands on the target exactly; a
server that does not follow the model is corrected per length (`corrections`) and, where it
can count, checked request by request (`loadgen.workloads.sizing`). The request rows record the
server's own prompt_tokens, so any residual error is visible in the summary.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

WORDS = ["the", "of", "and", "to", "in", "is", "was", "for", "that", "with", "as", "on", "by", "at", "from", "his", "her", "they", "this", "had", "not", "are", "but", "which", "have", "one", "were", "all", "their", "there", "been", "has", "when", "who", "will", "more", "if", "no", "out", "so", "said", "what", "up", "its", "about", "into", "than", "them", "can", "only", "other", "new", "some", "time", "could", "these", "two", "may", "then", "first", "any", "like", "now", "my", "over", "such", "our", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years", "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three"]

_BY_LEN: dict[int, list[str]] = {}
for _w in WORDS:
    _BY_LEN.setdefault(len(_w), []).append(_w)
_LENGTHS = sorted(_BY_LEN)
_WORD_BYTES = np.array([len(w.encode()) for w in WORDS], dtype=np.float64)
_MEAN_LETTERS = sum(len(w) for w in WORDS) / len(WORDS)


@functools.lru_cache(maxsize=64)
def _combos(per_word: float, per_letter: float) -> tuple[list[float], list[tuple[int, ...]]]:
    """Every multiset of one to three word lengths, by its cost: the ways to fill a remainder
    that whole words of the drawn text overshoot (a byte vocabulary has no 1-token word)."""
    out: list[tuple[float, tuple[int, ...]]] = []
    for a in _LENGTHS:
        out.append((per_word + per_letter * a, (a,)))
        for b in _LENGTHS:
            if b < a:
                continue
            out.append((2 * per_word + per_letter * (a + b), (a, b)))
            for c in _LENGTHS:
                if c >= b:
                    out.append((3 * per_word + per_letter * (a + b + c), (a, b, c)))
    out.sort()
    return [c for c, _ in out], [lens for _, lens in out]


def content_features(text: str) -> tuple[int, int]:
    """(words, letters) of a text: whitespace-separated words and their UTF-8 bytes."""
    words = text.split()
    return len(words), sum(len(w.encode()) for w in words)


@dataclass(frozen=True)
class TokenModel:
    """prompt_tokens ≈ overhead + per_word × words + per_letter × letters, measured against
    the target; the `template_*` terms are what a conversation adds around its messages."""

    per_word: float = 1.0
    overhead: float = 0.0  # BOS and, on the chat endpoint, the template around one message
    source: str = "assumed"  # assumed | measured (usage of probe requests) | tokenize
    per_letter: float = 0.0
    # A conversation (the endpoint's rendering of messages): tokens beyond its content for one
    # user message, and what each further turn (a reply and a user message) adds beyond theirs.
    template_first: float = 0.0
    template_turn: float = 0.0
    exact: bool = False  # predictions matched the target's /tokenize on every check text
    # (prompt tokens, server count - model count) at calibrated lengths, for servers whose
    # count is not linear in the model's terms; interpolated between them.
    corrections: tuple[tuple[float, float], ...] = ()

    @property
    def mean_word_cost(self) -> float:
        return max(1e-6, self.per_word + self.per_letter * _MEAN_LETTERS)

    def word_cost(self, word: str) -> float:
        return self.per_word + self.per_letter * len(word.encode())

    def content_tokens(self, text: str) -> float:
        words, letters = content_features(text)
        return self.per_word * words + self.per_letter * letters

    def predict(self, text: str) -> float:
        return self.overhead + self.content_tokens(text)

    def predict_features(self, words: int, letters: int) -> float:
        return self.overhead + self.per_word * words + self.per_letter * letters

    def correction(self, tokens: float) -> float:
        pts = self.corrections
        if not pts:
            return 0.0
        if tokens <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
            if tokens <= x1:
                return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
        return pts[-1][1]

    def template_tokens(self, turn: int) -> int:
        """Template tokens of a conversation's turn `turn` (0-based): whole numbers, so a
        recorded target minus them gives back the content that was asked for."""
        return round(self.template_first) + turn * round(self.template_turn)

    def words_for(self, tokens: float, *, with_overhead: bool = True) -> int:
        body = tokens - (self.overhead if with_overhead else 0.0)
        return max(1, round(body / self.mean_word_cost))

    def text_for(self, rng: np.random.Generator, tokens: float, *, with_overhead: bool = True) -> str:
        """Random words whose count under the model is `tokens` (the whole prompt, or with
        `with_overhead=False` a part of one). Draws a few more words than the estimate, so
        the number of draws depends only on the target and the model, never on the fit."""
        body = tokens - (self.overhead + self.correction(tokens) if with_overhead else 0.0)
        n = max(1, round(body / self.mean_word_cost))
        idx = rng.integers(0, len(WORDS), n + n // 8 + 2)
        k, drop, add = self._fit_costs(self.per_word + self.per_letter * _WORD_BYTES[idx], body)
        spaced = _SPACED
        text = "".join([spaced[i] for i in idx[: k - drop].tolist()]) if k > drop else ""
        return (text + self._added(k - drop, add)).lstrip()

    def fit(self, words: list[str], tokens: float) -> list[str]:
        """Words whose model cost is as close to `tokens` as whole words allow: the leading
        words of `words` (repeated from its start if it is too short), with up to two of the
        last replaced by up to three words of chosen lengths to land on the remainder."""
        if not words:
            words = ["the"]
        lens = np.fromiter((len(w.encode()) for w in words), dtype=np.float64, count=len(words))
        costs = self.per_word + self.per_letter * lens
        total = float(costs.sum())
        if 0 < total < tokens + 0.5:  # too short: repeat it from its start
            reps = int(np.ceil((tokens + 0.5) / total)) + 1
            words, costs = words * reps, np.tile(costs, reps)
        k, drop, add = self._fit_costs(costs, tokens)
        return words[: k - drop] + self._added(k - drop, add).split()

    def _fit_costs(self, costs: np.ndarray, tokens: float) -> tuple[int, int, tuple[int, ...]]:
        """(k, drop, add): the first k words, less the last `drop`, plus words of the lengths
        in `add`. One cumulative sum, so a 32K-token prompt costs about a millisecond."""
        cum = np.cumsum(costs)
        k = max(1, min(len(cum), int(np.searchsorted(cum, tokens + 0.5, side="right"))))
        total = float(cum[k - 1])
        if abs(tokens - total) < 0.5 or self.per_letter <= 0:
            return k, 0, ()  # exact, or every word costs the same and nothing can be swapped
        combo_costs, combo_lens = _combos(self.per_word, self.per_letter)
        best: tuple[float, int, tuple[int, ...]] = (abs(tokens - total), 0, ())
        for drop in range(min(2, k) + 1):
            need = tokens - (total - (float(cum[k - 1] - cum[k - 1 - drop]) if drop < k else total))
            i = bisect.bisect_left(combo_costs, need)
            for j in (i - 1, i):
                if 0 <= j < len(combo_costs):
                    err = abs(need - combo_costs[j])
                    if err < best[0] - 1e-9:
                        best = (err, drop, combo_lens[j])
        return k, best[1], best[2]

    @staticmethod
    def _added(position: int, lengths: tuple[int, ...]) -> str:
        """Words of the given lengths (picked by position, so the text stays seed-driven)."""
        out = []
        for n, length in enumerate(lengths):
            group = _BY_LEN[length]
            out.append(" " + group[(position + n) % len(group)])
        return "".join(out)

    @classmethod
    def from_probes(cls, words: tuple[int, int], tokens: tuple[int, int]) -> TokenModel:
        (w1, w2), (t1, t2) = words, tokens
        if w2 == w1 or t2 <= t1:
            raise ValueError("token calibration: probe prompts gave no usable token counts")
        per_word = (t2 - t1) / (w2 - w1)
        return cls(per_word=per_word, overhead=max(0.0, t1 - per_word * w1), source="measured")

    def describe(self) -> dict[str, Any]:
        return {"per_word": self.per_word, "overhead": self.overhead, "per_letter": self.per_letter,
                "source": self.source, "exact": self.exact,
                "template": {"first": round(self.template_first), "per_turn": round(self.template_turn)},
                "corrections": [list(p) for p in self.corrections]}


_SPACED = [" " + w for w in WORDS]


def random_words(rng: np.random.Generator, n: int) -> str:
    # Joining Python strings by index is several times cheaper than joining NumPy str_ items,
    # and this runs once per request on the client's event loop.
    spaced = _SPACED
    return "".join([spaced[i] for i in rng.integers(0, len(spaced), n).tolist()]).lstrip()


def make_prompt(rng: np.random.Generator, model: TokenModel, tokens: int) -> str:
    return model.text_for(rng, tokens)
