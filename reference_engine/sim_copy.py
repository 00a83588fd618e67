"""The sim model's habit of copying from its context, which n-gram drafts can hit.

Real models continue text they have seen (code being edited, a quoted document, a list
being repeated); that is what prompt-lookup speculation bets on. The sim's synthetic tokens
are a hash of position otherwise, which no draft could ever guess. With
`sim_copy_probability` q, the token at position p is, with probability q (a hash of the
sequence's stream and p, so greedy output stays a function of the context), the token that
followed the most recent earlier occurrence of the context's last 3 tokens. When those 3
tokens never occurred before (a recent token was not a copy), the anchor moves back one
token at a time, up to MAX_SKIP, and the copy resumes at the same offset past the source, so
a non-copied token in repetitive text breaks the copy for a few tokens, not for good. On text
without repeated 3-token runs (random, salted prompts) nothing is copied.
"""

from __future__ import annotations

ANCHOR = 3          # tokens the model matches against its context
# Tokens the anchor may step back over: a copy resumes after up to this many tokens that
# were not copies (a run of more than that, at q = 0.8, has odds below 1e-11).
MAX_SKIP = 16
_M64 = (1 << 64) - 1


def copied_token(text: str, p: int) -> int | None:
    """The token copied at position p of `text` (one code point per token), or None."""
    for skip in range(MAX_SKIP + 1):
        end = p - skip
        if end - ANCHOR < 0:
            return None
        # An occurrence wholly inside text[:end - 1] leaves a token after it at i + 3 + skip
        # that lies before p.
        i = text.rfind(text[end - ANCHOR:end], 0, end - 1)
        if i >= 0:
            return ord(text[i + ANCHOR + skip])
    return None


class ContextTexts:
    """Owned by the sim executor. Owns: each sequence's context as text, kept from one step
    to the next and dropped for a sequence absent from a step (rebuilt if it returns)."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}
        self._next: dict[int, str] = {}

    def text(self, seq_id: int, context: list[int], length: int) -> str:
        """The first `length` tokens of context as text."""
        text = self._next.get(seq_id) or self._texts.get(seq_id, "")
        if len(text) < length:
            text += "".join(map(chr, context[len(text):length]))
        elif len(text) > length:  # a recompute after preemption: same tokens, shorter view
            return text[:length]
        self._next[seq_id] = text
        return text

    def end_step(self) -> None:
        self._texts, self._next = self._next, {}
