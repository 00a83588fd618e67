"""Turning recorded reads into SSE events, content flags, coalescing and error classes."""

from __future__ import annotations

import json

import pytest

from infbench.loadgen.sse.parser import StreamParser, has_content, parse_reads


def ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def comp(text: str, finish: str | None = None) -> bytes:
    return ev({"id": "cmpl-7", "choices": [{"index": 0, "text": text, "finish_reason": finish}]})


def chat(content: str | None, role: bool = False) -> bytes:
    delta: dict[str, str] = {"role": "assistant"} if role else {}
    if content is not None:
        delta["content"] = content
    return ev({"id": "chatcmpl-9", "choices": [{"index": 0, "delta": delta}]})


USAGE = ev({"id": "cmpl-7", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"choices":[{"text":" hi"}]}', True),
        (b'{"choices":[{"text": " hi"}]}', True),
        (b'{"choices":[{"text":""}]}', False),
        (b'{"choices":[{"delta":{"role":"assistant","content":""}}]}', False),
        (b'{"choices":[{"delta":{"content":null}}]}', False),
        (b'{"choices":[{"delta":{"content":"x"}}]}', True),
        (b'{"choices":[{"delta":{"reasoning_content":"think"}}]}', True),
        (b'{"choices":[{"delta":{"content":"","x":"\\"text\\": \\"y\\""}}]}', False),
        (b'{"choices":[],"usage":{"completion_tokens":3}}', False),
    ],
)
def test_content_detection(payload: bytes, expected: bool) -> None:
    assert has_content(payload) is expected
    assert has_content(payload) == _parsed_has_content(payload)


def _parsed_has_content(payload: bytes) -> bool:
    obj = json.loads(payload)
    for c in obj.get("choices", []):
        d = c.get("delta", {})
        for v in (c.get("text"), d.get("content"), d.get("reasoning_content")):
            if isinstance(v, str) and v:
                return True
    return False


def test_one_event_per_read_timestamps_and_usage() -> None:
    reads = [comp(" a"), comp(" b"), comp(" c"), comp("", "length") + USAGE + DONE]
    out = parse_reads([10, 20, 35, 40], reads)
    assert out.error_class is None
    assert out.t_ns == [10, 20, 35, 40, 40, 40]
    assert out.content == [True, True, True, False, False, False]
    assert (out.first_content_ns, out.last_content_ns, out.last_chunk_ns) == (10, 35, 40)
    assert out.output_tokens == (3, "usage")
    assert out.response_id == "cmpl-7" and out.finish_reason == "length"
    assert out.num_coalesced == 0


def test_events_in_one_read_are_marked_coalesced() -> None:
    reads = [comp(" a") + comp(" b") + comp(" c"), comp(" d") + DONE]
    out = parse_reads([100, 200], reads)
    assert out.read_idx[:4] == [0, 0, 0, 1]
    assert out.coalesced[:4] == [False, True, True, False]
    assert out.num_coalesced == 2
    assert out.output_tokens == (4, "counted")


def test_event_split_across_reads_gets_time_of_completing_read() -> None:
    whole = comp(" a") + comp(" b")
    cut = len(comp(" a")) + 7
    out = parse_reads([1, 2, 3], [whole[:cut], whole[cut:], DONE])
    assert out.t_ns[:2] == [1, 2]
    assert out.coalesced[:2] == [False, False]


def test_crlf_line_endings() -> None:
    body = (comp(" a") + comp(" b") + DONE).replace(b"\n", b"\r\n")
    out = parse_reads([1, 2], [body[:9], body[9:]])
    assert out.error_class is None and out.num_content == 2


def test_chat_role_chunk_is_not_content_and_text_is_collected() -> None:
    reads = [chat("", role=True), chat("Hel"), chat("lo"), DONE]
    p = StreamParser(need_text=True)
    for i, r in enumerate(reads):
        p.feed(i, r)
    out = p.finish()
    assert out.content == [False, True, True, False]
    assert out.first_content_ns == 1
    assert out.text == "Hello"


def test_missing_done_is_truncated() -> None:
    out = parse_reads([1, 2], [comp(" a"), comp(" b")])
    assert out.error_class == "truncated_sse"


def test_stream_ending_mid_event_is_truncated() -> None:
    out = parse_reads([1, 2], [comp(" a"), comp(" b")[:10]])
    assert out.error_class == "truncated_sse"


def test_non_json_event_is_malformed() -> None:
    out = parse_reads([1, 2, 3], [comp(" a"), b"data: {not json\n\n", comp(" b") + DONE])
    assert out.error_class == "malformed_sse"
    assert out.num_content == 2


def test_garbage_line_is_malformed() -> None:
    out = parse_reads([1], [b"hello there\n\n" + DONE])
    assert out.error_class == "malformed_sse"


def test_invalid_utf8_is_classified() -> None:
    bad = b'data: {"choices":[{"text":"\xff\xfe"}]}\n\n'
    out = parse_reads([1, 2], [comp(" a") + bad, DONE])
    assert out.error_class == "invalid_utf8"


def test_in_stream_error_object_is_server_error() -> None:
    out = parse_reads([1, 2], [comp(" a"), ev({"error": {"message": "engine died"}}) + DONE])
    assert out.error_class == "server_error"
    assert "engine died" in (out.error_message or "")


def test_comment_and_event_fields_are_valid_sse() -> None:
    named = b'event: message\nid: 4\ndata: {"choices":[{"text":"x"}]}\n\n'
    out = parse_reads([1], [b": keep-alive\n\n" + named + comp(" a") + DONE])
    assert out.error_class is None and out.num_content == 2


def test_retime_uses_arrival_stamps_and_keeps_uncovered_bytes() -> None:
    from infbench.loadgen.http.client import RawResponse, retime

    a, b, c = comp(" a"), comp(" b"), comp(" c") + DONE
    # The task saw everything in two reads, late; the protocol stamped b and c on arrival.
    raw = RawResponse(send_ns=0, read_ns=[100, 200], reads=[a + b, c],
                      recv_log=[50, len(a), len(a + b), 60, len(a + b), -1])
    read_ns, reads = retime(raw)
    assert b"".join(reads) == a + b + c
    # `a` came with the headers, unstamped; it cannot have arrived after `b`.
    assert read_ns == [50, 50, 60]
    out = parse_reads(read_ns, reads)
    assert out.t_ns[:3] == [50, 50, 60]


@pytest.mark.parametrize(
    ("payload", "choices", "usage"),
    [
        (b'{"choices":[{"text":" hi"}]}', True, False),
        (b'{"choices": [ {"delta":{}} ]}', True, False),
        (b'{"choices":[],"usage":{"completion_tokens":3}}', False, True),
        (b'{"choices": [ ], "usage": null}', False, False),
        (b'{"choices":[{"text":"\\"choices\\": [1]"}],"usage":null}', True, False),
        (b'{"choices":[{"text":"\\"usage\\": {}"}]}', True, False),
        (b'{"id":"x","usage":{"prompt_tokens":1},"choices":[{"text":"a"}]}', True, True),
    ],
)
def test_choices_and_usage_detection(payload: bytes, choices: bool, usage: bool) -> None:
    from infbench.loadgen.sse.parser import carries_choices, carries_usage

    obj = json.loads(payload)
    assert carries_choices(payload) is choices is bool(obj.get("choices"))
    assert carries_usage(payload) is usage is isinstance(obj.get("usage"), dict)


def test_late_usage_and_done_do_not_end_the_stream() -> None:
    # Tokens every 10 ms to 121 ms, the finish event with the last token; usage and [DONE]
    # 279 ms later (the case: e2e must end at 121 ms, not 400 ms).
    times = [11 + 10 * k for k in range(12)] + [400]
    reads = [comp(f" t{k}") for k in range(11)] + [comp(" last") + comp("", "length"), USAGE + DONE]
    out = parse_reads(times, reads)
    assert out.error_class is None and out.num_content == 12
    assert (out.last_content_ns, out.last_choices_ns) == (121, 121)
    assert (out.usage_ns, out.done_ns, out.last_chunk_ns) == (400, 400, 400)
    assert out.mean_itl_ns() == pytest.approx(10.0)


def test_finish_event_after_the_last_token_ends_the_stream() -> None:
    # A chat stream whose finish chunk (choices, no content) comes 5 ms after the last token,
    # usage 50 ms after that and [DONE] 30 ms later still: each stamp in its own field.
    fin = ev({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out = parse_reads([3, 8, 13, 63, 93], [chat("", role=True) + chat("a"), chat("b"), fin, USAGE, DONE])
    assert (out.first_content_ns, out.last_content_ns) == (3, 8)
    assert (out.last_choices_ns, out.usage_ns, out.done_ns) == (13, 63, 93)
    assert out.finish_reason == "stop"


def test_spread_itl_counts_only_events_after_the_first_content_read() -> None:
    # read 0: role chunk + 2 tokens at 5; read 1: 3 tokens at 35; read 2: one at 45.
    reads = [chat("", role=True) + chat("a") + chat("b"), chat("c") + chat("d") + chat("e"), chat("f") + DONE]
    out = parse_reads([5, 35, 45], reads)
    assert out.num_content == 6 and out.num_itl == 4
    assert out.mean_itl_ns() == pytest.approx((45 - 5) / 4)  # 10, 10, 10 and 10
    assert out.num_coalesced == 3


def test_unterminated_done_is_stamped_with_its_read() -> None:
    out = parse_reads([1, 2, 9], [comp(" a"), comp(" b"), b"data: [DONE]"])
    assert out.done and out.done_ns == 9 and out.error_class is None
    assert out.last_choices_ns == 2 and out.usage_ns is None


def test_single_token_stream_has_no_itl() -> None:
    out = parse_reads([1, 2], [comp(" a"), DONE])
    assert out.num_itl == 0 and out.mean_itl_ns() is None
