"""Sizing on the send path: conversation turns, and targets the token model cannot predict.

Workloads size their text with the target's token model before anything is sent
(`TokenModel.text_for`); that is exact where the model matched the target's `/tokenize`. Two
cases need more, and the runner hands each request here just before sending it:

- A conversation's turn. Its history holds replies the server wrote, which no model counts
  in advance, and the endpoint wraps every message in template tokens. The workload's target
  for turn t is the content it planned (its user messages and max_tokens-long replies); the
  recorded target adds the target's template tokens for t turns
  (`TokenModel.template_tokens`), so it is the whole prompt as the server counts it. The new
  user message is sized to make the prompt that long: counted with `/tokenize` where the
  target has it, else estimated from the previous turn's `usage.prompt_tokens`, the reply
  and the template's per-turn cost. A reply shorter than its max_tokens (a server that
  stopped at EOS) leaves room the next message takes up, so every turn's prompt keeps its
  planned length and one seed still plans the same conversations on any target.
- A target with `/tokenize` whose counts the model did not match exactly: the prompt is
  counted and its adjustable words (`RequestSpec.fill`) refitted until the count is the
  target, in a few rounds, keeping the closest.

Ownership: one per runner, used from its event loop only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from infbench.loadgen.workloads.base import RequestSpec
from infbench.loadgen.workloads.prompts import TokenModel

ROUNDS = 6  # counts per prompt at most: an additive tokenizer lands in one or two
NUDGES = 4  # counts after them, adding or dropping whole words at the end
FILLER = "the"  # one token in every vocabulary seen (BPE, SentencePiece, bytes: 1 + 3)

CountFn = Callable[[RequestSpec], Awaitable["int | None"]]


@dataclass
class SizingStats:
    counted: int = 0  # /tokenize calls made during the run
    unavailable: int = 0  # counts the target did not give (then the estimate stands)
    off_target: int = 0  # prompts still off their target after every round


def _text(spec: RequestSpec) -> str:
    if spec.messages is not None:
        return spec.messages[-1]["content"]
    return spec.prompt or ""


def _set_text(spec: RequestSpec, text: str) -> None:
    if spec.messages is not None:
        # In place: a conversation's history holds this same message, so the next turn
        # resends what was actually sent.
        spec.messages[-1]["content"] = text
    else:
        spec.prompt = text


class Sizer:
    def __init__(self, model: TokenModel, count: CountFn | None) -> None:
        self.model = model
        self.count = count
        self.stats = SizingStats()
        # Per conversation: the server's count of its last turn's prompt (its target where the
        # server reported none), the base of the next turn's estimate.
        self._last: dict[int, int] = {}

    def observe(self, spec: RequestSpec, prompt_tokens: int | None) -> None:
        """A request was recorded: keep what the next turn of its conversation builds on."""
        if spec.conversation_id is not None and spec.target_input_tokens is not None:
            self._last[spec.conversation_id] = prompt_tokens or spec.target_input_tokens

    def forget(self, conversation_id: int) -> None:
        self._last.pop(conversation_id, None)

    async def size(self, spec: RequestSpec) -> None:
        """Make `spec`'s prompt count its target (conversations: plus the template)."""
        if spec.fill is None or spec.target_input_tokens is None:
            return
        conversation = spec.conversation_id is not None
        if conversation:
            turn = spec.turn or 0
            spec.target_input_tokens += self.model.template_tokens(turn)
            self._refit(spec, spec.target_input_tokens - self._rest_estimate(spec, turn))
            if self.count is None or (self.model.exact and turn == 0):
                return
        elif self.count is None or self.model.exact:
            return
        await self._converge(spec)

    def _rest_estimate(self, spec: RequestSpec, turn: int) -> float:
        """The prompt's tokens other than the new message's content, by the model."""
        messages = spec.messages or []
        prev = self._last.get(spec.conversation_id or 0)
        if turn > 0 and prev is not None and len(messages) >= 2:
            return prev + self.model.content_tokens(messages[-2]["content"]) + round(self.model.template_turn)
        return self.model.template_tokens(turn) + sum(self.model.content_tokens(m["content"])
                                                      for m in messages[:-1])

    def _refit(self, spec: RequestSpec, body_tokens: float) -> None:
        assert spec.fill is not None
        a, b = spec.fill
        text = _text(spec)
        body = " ".join(self.model.fit(text[a:b].split(), body_tokens))
        _set_text(spec, text[:a] + body + text[b:])
        spec.fill = (a, a + len(body))

    async def _converge(self, spec: RequestSpec) -> None:
        assert self.count is not None and spec.fill is not None and spec.target_input_tokens is not None
        target = spec.target_input_tokens
        best: tuple[int, str, tuple[int, int]] | None = None
        a, b = spec.fill
        goal = self.model.content_tokens(_text(spec)[a:b])  # what the body is fitted to, in model units
        lo: float | None = None  # goals whose count was below the target, and above it
        hi: float | None = None
        for _ in range(ROUNDS):
            self.stats.counted += 1
            n = await self.count(spec)
            if n is None:
                self.stats.unavailable += 1
                break
            err = n - target
            if best is None or abs(err) < abs(best[0]):
                best = (err, _text(spec), spec.fill)
            if err == 0:
                return
            # The goal moves by the server's error; once goals on both sides of the target are
            # known (a count that rounds, as a quarter token per byte does, can jump over it),
            # it bisects between them.
            if err < 0:
                lo = goal if lo is None else max(lo, goal)
            else:
                hi = goal if hi is None else min(hi, goal)
            goal = (lo + hi) / 2 if lo is not None and hi is not None else goal - err
            self._refit(spec, goal)
        if best is not None:
            _set_text(spec, best[1])
            spec.fill = best[2]
            if best[0] != 0 and not await self._nudge(spec, best[0]):
                self.stats.off_target += 1

    async def _nudge(self, spec: RequestSpec, err: int) -> bool:
        """The last resort, for a tokenizer whose counts no word mix of the model follows
        exactly (a small BPE vocabulary: 3 prompts in 24 stayed a token off after every
        round): whole words at the end of the fill, a short common word added per missing
        token, the last word dropped while over. The closest text is kept."""
        assert self.count is not None and spec.fill is not None
        best = (err, _text(spec), spec.fill)
        for _ in range(NUDGES):
            a, b = spec.fill
            text = _text(spec)
            words = text[a:b].split()
            per = max(1, round(self.model.word_cost(FILLER)))
            words = words + [FILLER] * -(err // per) if err < 0 else words[:-1] or [FILLER]
            body = " ".join(words)
            _set_text(spec, text[:a] + body + text[b:])
            spec.fill = (a, a + len(body))
            self.stats.counted += 1
            n = await self.count(spec)
            if n is None:
                break
            err = n - (spec.target_input_tokens or 0)
            if abs(err) < abs(best[0]):
                best = (err, _text(spec), spec.fill)
            if err == 0:
                return True
        _set_text(spec, best[1])
        spec.fill = best[2]
        return best[0] == 0
