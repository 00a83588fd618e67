"""Token calibration: how the target counts the prompts infbench writes.

Where the target has vLLM's `POST /tokenize`, every count below is the server's own, for free
(nothing is generated), and the fitted model is checked against fresh texts: when it matches
all of them exactly (`TokenModel.exact`) prompts are sized locally, with no per-request call.
Elsewhere the counts are `usage.prompt_tokens` of 1-token probe requests, and the model is
corrected per length: probes at a ladder of prompt lengths record how far the server's count
is from the model's, and prompts of those lengths are sized by that much less.

Counts are taken in the form the run sends: a plain prompt on `/v1/completions`, one user
message on `/v1/chat/completions` (so the chat template's tokens are the model's overhead),
and for conversations the endpoint's rendering of several messages (the template's cost per
turn).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import numpy as np

from infbench.loadgen.http.bodies import ENDPOINTS, flatten
from infbench.loadgen.workloads.prompts import WORDS, TokenModel, content_features

TOKENIZE_PATH = "/tokenize"
# Probe lengths for the per-length correction; those above the target's max_model_len (or
# above the unknown-limit cap) are left out.
LADDER = (64, 256, 1024, 4096)
UNKNOWN_LIMIT = 2048
_SHORT = [w for w in WORDS if len(w) <= 2]
_LONG = [w for w in WORDS if len(w) >= 5]


def _cycle(words: list[str], n: int) -> str:
    return " ".join(words[i % len(words)] for i in range(n))


def _mixed(seed: int, n: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n).tolist())


@dataclass
class Counter:
    """Counts a prompt as the target would for this endpoint: by `/tokenize` when `tokenize`,
    else by the usage of a 1-token request. None when the target gave no count."""

    session: aiohttp.ClientSession
    url: str  # base URL, no trailing slash
    endpoint: str
    model: str
    headers: dict[str, str]
    tokenize: bool = False
    ignore_eos: bool = True

    async def prompt(self, text: str) -> int | None:
        if self.endpoint == "chat":
            return await self.messages([{"role": "user", "content": text}])
        return await self._count({"prompt": text})

    async def messages(self, messages: list[dict[str, str]]) -> int | None:
        if self.endpoint == "chat":
            return await self._count({"messages": messages})
        return await self._count({"prompt": flatten(messages)})

    async def _count(self, payload: dict[str, Any]) -> int | None:
        if self.tokenize:
            return await tokenize_count(self.session, self.url, self.model, self.headers, payload)
        body: dict[str, Any] = {"model": self.model, "max_tokens": 1, "temperature": 0.0, **payload}
        if self.ignore_eos:
            body["ignore_eos"] = True
        return _int_field(await _post(self.session, self.url + ENDPOINTS[self.endpoint], body, self.headers),
                          "usage", "prompt_tokens")


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                headers: dict[str, str]) -> Any:
    try:
        async with session.post(url, json=body, headers=headers) as r:
            if r.status != 200:
                return None
            return json.loads(await r.text(errors="replace"))
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def _int_field(doc: Any, *path: str) -> int | None:
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, int) and not isinstance(doc, bool) else None


async def tokenize_count(session: aiohttp.ClientSession, url: str, model: str, headers: dict[str, str],
                         payload: dict[str, Any]) -> int | None:
    """vLLM's `POST /tokenize` with `{"model", **payload}` (payload: prompt or messages)."""
    doc = await _post(session, url + TOKENIZE_PATH, {"model": model, **payload}, headers)
    return _int_field(doc, "count")


async def _retry(count: Any, arg: Any) -> int | None:
    """One count, asked again once if the target gave none."""
    n = await count(arg)
    return n if n is not None else await count(arg)


def _fit(points: list[tuple[int, int, int]]) -> tuple[float, float, float] | None:
    """Least-squares (overhead, per_word, per_letter) from (words, letters, count) points."""
    a = np.array([[1.0, w, ltr] for w, ltr, _ in points])
    y = np.array([float(c) for _, _, c in points])
    (overhead, per_word, per_letter), *_ = np.linalg.lstsq(a, y, rcond=None)
    # A model that does not grow with the text cannot size anything (a server that reports a
    # constant, or nothing useful): the caller falls back to the assumed model.
    if per_word + per_letter * 3.0 < 0.05 or per_word < -0.5 or per_letter < -0.5:
        return None
    return float(overhead), float(per_word), float(per_letter)


def _clean(x: float) -> float:
    """Fitted integers come back as 0.9999999; round those, so exact models print exactly."""
    return float(round(x)) if abs(x - round(x)) < 1e-6 else x


async def calibrate(counter: Counter, max_model_len: int | None) -> TokenModel:
    """The token model of this target and endpoint; the assumed one when it gives no counts."""
    shapes = [_cycle(_SHORT, 8), _cycle(_LONG, 8), _cycle(_SHORT, 40), _cycle(_LONG, 40), _mixed(3, 24)]
    points = []
    for text in shapes:
        # A probe the target failed (an overloaded or fault-injecting server) is left out; the
        # fit needs three of the five shapes.
        n = await _retry(counter.prompt, text)
        if n is not None:
            points.append((*content_features(text), n))
    if len(points) < 3:
        return TokenModel()
    fitted = _fit(points)
    if fitted is None:
        return TokenModel()
    overhead, per_word, per_letter = (_clean(x) for x in fitted)
    model = TokenModel(per_word=per_word, overhead=overhead, per_letter=per_letter,
                       source="tokenize" if counter.tokenize else "measured")
    x, y, z = _mixed(7, 12), _mixed(8, 9), _mixed(9, 15)
    one = await _retry(counter.messages, [{"role": "user", "content": x}])
    three = await _retry(counter.messages, [{"role": "user", "content": x}, {"role": "assistant", "content": y},
                                             {"role": "user", "content": z}])
    if one is not None and three is not None:
        first = one - model.content_tokens(x)
        turn = three - first - sum(model.content_tokens(t) for t in (x, y, z))
        model = replace(model, template_first=_clean(first), template_turn=_clean(turn))
    if counter.tokenize and await _matches(counter, model):
        return replace(model, exact=True)
    # Long prompts pin the slope better than the short shapes: refit on every point, then keep
    # what the refit still misses at each ladder length as that length's correction.
    ladder = await _ladder(counter, model, max_model_len)
    refit = _fit(points + [p for _, p in ladder])
    if refit is not None:
        overhead, per_word, per_letter = (_clean(v) for v in refit)
        model = replace(model, overhead=overhead, per_word=per_word, per_letter=per_letter)
    corrections = tuple((float(length), n - model.predict_features(w, ltr)) for length, (w, ltr, n) in ladder)
    return replace(model, corrections=corrections)


async def _matches(counter: Counter, model: TokenModel) -> bool:
    """Whether the model's count is the server's for fresh texts, for every word as a
    prompt's first word, and for a conversation."""
    for seed, n in ((11, 5), (12, 60), (13, 300)):
        text = _mixed(seed, n)
        if await counter.prompt(text) != round(model.predict(text)):
            return False
    if not await _first_words_match(counter, model):
        return False
    msgs = [{"role": "user", "content": _mixed(14, 30)}, {"role": "assistant", "content": _mixed(15, 7)},
            {"role": "user", "content": _mixed(16, 20)}]
    want = model.template_tokens(1) + sum(model.content_tokens(m["content"]) for m in msgs)
    return await counter.messages(msgs) == round(want)


async def _first_words_match(counter: Counter, model: TokenModel) -> bool:
    """A prompt's first word has no space before it, and a byte-level BPE may split the bare
    word where it keeps the spaced one whole (seen on a small vocabulary: one prompt in 24 a
    token short), which fresh texts catch only by chance: every word is counted alone."""
    gate = asyncio.Semaphore(16)

    async def one(word: str) -> bool:
        async with gate:
            return await counter.prompt(word) == round(model.predict(word))

    return all(await asyncio.gather(*(one(w) for w in WORDS)))


async def _ladder(counter: Counter, model: TokenModel,
                  max_model_len: int | None) -> list[tuple[int, tuple[int, int, int]]]:
    """(length, (words, letters, server count)) for prompts sized to each ladder length."""
    limit = (max_model_len - 8) if max_model_len else UNKNOWN_LIMIT
    out = []
    rng = np.random.default_rng(21)
    for length in LADDER:
        if length > limit:
            break
        text = model.text_for(rng, length)
        n = await _retry(counter.prompt, text)
        if n is None:
            continue  # too long for the server after all, or a failed probe: not measured
        out.append((length, (*content_features(text), n)))
    return out
