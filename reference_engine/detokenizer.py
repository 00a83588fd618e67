"""Streaming detokenizer: turn sampled token ids into text that is safe to send.

Two things make streaming harder than decoding the finished output:

* a character may span several byte tokens (an emoji is four), so a token can end
  mid-character; the incremental UTF-8 decoder keeps those bytes until the character
  completes, and only at flush does an unfinished tail become U+FFFD;
* a stop string may arrive split across tokens, and none of it may ever be sent; so
  any tail of the text that could still grow into a stop string is held back.

Stop semantics (identical to :func:`reference_decode`): generation stops at the stop
occurrence that *ends* first in the decoded text (on a tie, the longest one), because
that is the moment a streaming engine can see it. Text from the stop on is dropped
(or kept through the stop when ``include_stop_str_in_output``).

Cost per push depends on the new bytes and the stop strings, never on the length of the
output so far: only the held-back tail, shorter than the longest stop string, is searched
again, and nothing already sent is decoded twice.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence

from reference_engine.tokenizer import ByteTokenizer


class IncrementalDetokenizer:
    def __init__(
        self,
        tokenizer: ByteTokenizer,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
    ) -> None:
        if isinstance(stop, str):
            stop = [stop]
        for index, s in enumerate(stop):
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop[{index}] must be a non-empty string")
        self._tokenizer = tokenizer
        self._stops = tuple(stop)
        self._max_stop = max((len(s) for s in self._stops), default=0)
        self._include_stop = include_stop_str_in_output
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""  # decoded text not yet returned: always shorter than the longest stop
        self.stopped = False
        self.stop_reason: str | None = None  # the stop string that ended the text

    def push(self, token_ids: Iterable[int]) -> str:
        """Feed newly sampled tokens; return the text that is now safe to send."""
        if self.stopped:
            return ""
        raw = b"".join(self._tokenizer.token_bytes(t) for t in token_ids)
        return self._release(self._decoder.decode(raw, final=False), final=False)

    def flush(self) -> str:
        """End of output: release held text (an unfinished character becomes U+FFFD)."""
        if self.stopped:
            return ""
        return self._release(self._decoder.decode(b"", final=True), final=True)

    def _release(self, new_text: str, final: bool) -> str:
        window = self._held + new_text
        hit = _first_stop(window, self._stops)
        if hit is not None:
            start, stop = hit
            self.stopped = True
            self.stop_reason = stop
            self._held = ""
            return window[: start + len(stop)] if self._include_stop else window[:start]
        keep = 0 if final else _stop_prefix_tail(window, self._stops, self._max_stop)
        cut = len(window) - keep
        self._held = window[cut:]
        return window[:cut]


def _first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """The stop occurrence that ends first in ``text`` (longest on a tie), as (start, stop)."""
    best: tuple[int, int, str] | None = None  # (end, -length, stop)
    for s in stops:
        start = text.find(s)
        if start < 0:
            continue
        candidate = (start + len(s), -len(s), s)
        if best is None or candidate[:2] < best[:2]:
            best = candidate
    if best is None:
        return None
    end, neg_len, s = best
    return end + neg_len, s


def _stop_prefix_tail(text: str, stops: Sequence[str], max_stop: int) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of some stop."""
    for length in range(min(len(text), max_stop - 1), 0, -1):
        tail = text[-length:]
        if any(s.startswith(tail) for s in stops):
            return length
    return 0


def reference_decode(
    tokenizer: ByteTokenizer,
    token_ids: Iterable[int],
    stop: Sequence[str] = (),
    include_stop_str_in_output: bool = False,
) -> str:
    """Decode the whole output at once and cut it at the first stop: the oracle for tests."""
    text = tokenizer.decode(token_ids)
    # Only a stop visible by the end of some token can stop a stream; a stop ending
    # first in the whole text is visible no later than any other, so the whole-text
    # rule and the streaming rule pick the same occurrence.
    hit = _first_stop(text, tuple(stop))
    if hit is None:
        return text
    start, s = hit
    return text[: start + len(s)] if include_stop_str_in_output else text[:start]
