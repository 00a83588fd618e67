"""The fast whole-body parser must give exactly what the general event-by-event parser gives."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from infbench.loadgen.http.client import RawResponse, arrival_times, retime
from infbench.loadgen.sse.parser import FastParser, ParsedStream, parse_reads


def _event(obj: object, compact: bool = False) -> bytes:
    # compact: `{"text":"a"}` as vLLM and most servers write it; else Python's `{"text": "a"}`
    return b"data: " + json.dumps(obj, separators=(",", ":") if compact else None).encode() + b"\n\n"


def _stream(rng: np.random.Generator, n_tokens: int, done: bool = True, compact: bool = False) -> bytes:
    """A completions stream; its tail varies: a finish event or none, usage or none, usage in
    every event (vLLM's continuous usage stats) or in one event with empty choices."""
    ev = functools.partial(_event, compact=compact)
    every_usage = rng.random() < 0.2
    usage = {"prompt_tokens": 3, "completion_tokens": n_tokens}
    parts = [ev({"id": "cmpl-7", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    for _ in range(n_tokens):
        text = "" if rng.random() < 0.1 else str(rng.choice([" a", " \"q\"", " text:", "é"]))
        parts.append(ev({"id": "cmpl-7", "choices": [{"index": 0, "text": text, "finish_reason": None}],
                             **({"usage": usage} if every_usage else {})}))
    if rng.random() < 0.8:
        parts.append(ev({"id": "cmpl-7", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    if rng.random() < 0.8:
        parts.append(ev({"id": "cmpl-7", "choices": [], "usage": usage}))
    if done:
        parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def _recorded(rng: np.random.Generator, body: bytes) -> RawResponse:
    """Cut the body into random reads; the protocol stamps all but the bytes before `first`."""
    cuts = np.sort(rng.choice(np.arange(1, len(body)), size=min(len(body) - 1, int(rng.integers(1, 40))),
                              replace=False))
    bounds = [0, *cuts.tolist(), len(body)]
    arrivals = np.cumsum(rng.integers(1, 1000, len(bounds) - 1)).tolist()
    first = int(rng.integers(0, len(bounds) - 1))  # reads before this one came with the headers
    log: list[int] = []
    for i in range(first, len(bounds) - 1):
        log += [arrivals[i], bounds[i], bounds[i + 1]]
    # The task saw the bytes in fewer, later reads.
    task_cuts = bounds[:: int(rng.integers(1, 4))]
    if task_cuts[-1] != len(body):
        task_cuts.append(len(body))
    reads = [body[a:b] for a, b in zip(task_cuts, task_cuts[1:], strict=False)]
    read_ns = [max(arrivals) + 10 * i for i in range(len(reads))]
    return RawResponse(send_ns=0, read_ns=read_ns, reads=reads, recv_log=log)


def _fast(raw: RawResponse) -> ParsedStream | None:
    p = FastParser(b"".join(raw.reads), functools.partial(arrival_times, raw))
    while p.feed():
        if p.finished:
            return p.finish()
    return None


def _same_reads(a: list[int] | np.ndarray, b: list[int] | np.ndarray) -> bool:
    """Read numbering may differ; which events share a read may not."""
    a, b = np.asarray(a), np.asarray(b)
    return bool(np.array_equal(np.diff(a) == 0, np.diff(b) == 0))


@pytest.mark.parametrize("seed", range(40))
def test_fast_parser_matches_general_parser(seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = _recorded(rng, _stream(rng, int(rng.integers(1, 60)), done=seed % 5 != 0, compact=seed % 2 == 0))
    fast = _fast(raw)
    assert fast is not None
    slow = parse_reads(*retime(raw))
    for name in ("seq", "t_ns", "nbytes", "content", "coalesced"):
        assert np.array_equal(np.asarray(getattr(fast, name)), np.asarray(getattr(slow, name))), name
    assert _same_reads(fast.read_idx, slow.read_idx)
    for name in ("num_content", "num_coalesced", "first_chunk_ns", "first_content_ns", "last_content_ns",
                 "last_chunk_ns", "last_choices_ns", "usage_ns", "done_ns", "num_itl", "response_id",
                 "finish_reason", "usage", "error_class", "done", "response_bytes"):
        assert getattr(fast, name) == getattr(slow, name), name


def test_fast_parser_works_through_a_long_body_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    import infbench.loadgen.sse.fast as sse

    monkeypatch.setattr(sse, "FAST_PIECE_BYTES", 1000)
    rng = np.random.default_rng(1)
    body = _stream(rng, 500)
    raw = RawResponse(send_ns=0, read_ns=list(range(100, 100 + len(body) // 50 + 1)),
                      reads=[body[i:i + 50] for i in range(0, len(body), 50)])
    p = FastParser(body, functools.partial(arrival_times, raw))
    fed = 0
    while p.feed():
        fed += 1
        if p.finished:
            break
    assert p.finished and fed > 10
    out, slow = p.finish(), parse_reads(raw.read_ns, raw.reads)
    assert np.array_equal(out.t_ns, slow.t_ns) and out.num_content == slow.num_content


@pytest.mark.parametrize("body", [
    b'data: {"choices":[{"text":"a"}]}\r\n\r\n',                     # CRLF
    b'event: x\ndata: {"choices":[{"text":"a"}]}\n\n',               # several fields
    b'data: {not json\n\ndata: [DONE]\n\n',                          # not an object
    b'data: {"error":{"message":"boom"}}\n\n',                       # error event
    b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"te',   # cut inside an event
    b'data: [DONE]\n\ndata: {"choices":[{"text":"a"}]}\n\n',         # events after [DONE]
])
def test_other_shapes_are_left_to_the_general_parser(body: bytes) -> None:
    raw = RawResponse(send_ns=0, read_ns=[1], reads=[body])
    assert _fast(raw) is None


def test_invalid_utf8_is_classified_on_the_fast_path() -> None:
    body = b'data: {"id":"x","choices":[{"text":"\xff"}]}\n\ndata: [DONE]\n\n'
    out = _fast(RawResponse(send_ns=0, read_ns=[1], reads=[body]))
    assert out is not None and out.error_class == "invalid_utf8"


@pytest.mark.parametrize("tail_ns", [0, 279_000_000, 2_000_000_000])
def test_late_usage_and_done_on_the_fast_path(tail_ns: int) -> None:
    """Tokens 10 ms apart, the finish event with the last one, usage and [DONE] `tail_ns`
    later in their own read: e2e's end (the last event carrying choices) stays at the last
    token on both parsers."""
    events = [_event({"id": "c", "choices": [{"index": 0, "text": f" t{k}", "finish_reason": None}]})
              for k in range(40)]
    events.append(_event({"id": "c", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    tail = _event({"id": "c", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 40}})
    body = b"".join(events) + tail + b"data: [DONE]\n\n"
    # One read per token event; the finish event in the last token's read.
    bounds = np.cumsum([len(e) for e in events])[[*range(39), 40]]
    log: list[int] = []
    start = 0
    for k, end in enumerate(bounds.tolist()):
        log += [1_000_000 + 10_000_000 * k, start, end]
        start = end
    last = log[-3]  # the finish event's read, with the last token's stamp below it
    log += [last + tail_ns, start, len(body)]
    raw = RawResponse(send_ns=0, read_ns=[log[-3]], reads=[body], recv_log=log)
    fast, slow = _fast(raw), parse_reads(*retime(raw))
    assert fast is not None
    for out in (fast, slow):
        assert out.last_choices_ns == last and out.last_content_ns <= last
        assert out.usage_ns == out.done_ns == last + tail_ns
