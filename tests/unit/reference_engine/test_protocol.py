"""OpenAI request parsing: what is accepted, and the field named when it is not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reference_engine import protocol
from reference_engine.protocol import ApiError


def rejects(parse: Any, body: Any) -> ApiError:
    with pytest.raises(ApiError) as excinfo:
        parse(body)
    assert excinfo.value.status == 400
    return excinfo.value


def test_completion_defaults_follow_openai() -> None:
    req = protocol.parse_completion({"model": "m", "prompt": "hi"})
    assert (req.max_tokens, req.temperature, req.top_p, req.stop, req.stream) == (
        16, 1.0, 1.0, [], False)
    assert req.prompt_text == "hi" and req.prompt_token_ids is None


def test_prompt_forms_token_ids_and_one_element_batch() -> None:
    assert protocol.parse_completion({"model": "m", "prompt": [1, 2]}).prompt_token_ids == [1, 2]
    assert protocol.parse_completion({"model": "m", "prompt": ["x"]}).prompt_text == "x"
    assert rejects(protocol.parse_completion, {"model": "m", "prompt": ["a", "b"]}).param == \
        "prompt"
    assert rejects(protocol.parse_completion, {"model": "m", "prompt": [True]}).param == "prompt"


@pytest.mark.parametrize(("field", "value"), [
    ("max_tokens", True), ("max_tokens", 1.0), ("max_tokens", 0), ("seed", "1"),
    ("temperature", 2.5), ("temperature", -0.1), ("top_p", 1.5), ("top_p", 0),
    ("stop", ""), ("stop", ["ok", 3]), ("n", 3), ("ignore_eos", 1), ("stream", "true"),
])
def test_wrong_types_and_ranges_name_the_field(field: str, value: Any) -> None:
    err = rejects(protocol.parse_completion, {"model": "m", "prompt": "x", field: value})
    assert err.param == field and field in err.message
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}


def test_stop_accepts_a_string_or_list() -> None:
    assert protocol.parse_completion({"model": "m", "prompt": "x", "stop": "\n"}).stop == ["\n"]
    assert protocol.parse_completion(
        {"model": "m", "prompt": "x", "stop": ["a", "b"]}).stop == ["a", "b"]


def test_chat_prefers_max_completion_tokens_and_leaves_default_open() -> None:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"},
                                         {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": None}]
    req = protocol.parse_chat({"model": "m", "messages": msgs, "max_tokens": 5,
                               "max_completion_tokens": 9})
    assert req.max_tokens == 9
    assert req.chat_messages == [{"role": "user", "content": "ab"},
                                 {"role": "assistant", "content": ""}]
    assert protocol.parse_chat({"model": "m", "messages": msgs}).max_tokens is None


def test_chat_rejects_non_text_parts_and_unknown_roles() -> None:
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]
    assert rejects(protocol.parse_chat, {"model": "m", "messages": image}).param == \
        "messages[0].content"
    robot = [{"role": "robot", "content": "x"}]
    assert rejects(protocol.parse_chat, {"model": "m", "messages": robot}).param == \
        "messages[0].role"


def test_stream_options_need_stream() -> None:
    body = {"model": "m", "prompt": "x", "stream_options": {"include_usage": True}}
    assert rejects(protocol.parse_completion, body).param == "stream_options"
    req = protocol.parse_completion({**body, "stream": True})
    assert req.include_usage


def test_decode_body_rejects_non_objects() -> None:
    assert rejects(protocol.decode_body, b"{oops").param is None
    assert "object" in rejects(protocol.decode_body, b"[]").message
    assert rejects(protocol.decode_body, b"\xff\xfe").status == 400


def test_stream_chunks_and_usage_chunk_shapes() -> None:
    req = protocol.parse_chat({"model": "m", "messages": [{"role": "user", "content": "x"}],
                               "stream": True, "stream_options": {"include_usage": True}})
    opening = protocol.chunk(req, "chatcmpl-1", 0, None, role=True)
    assert opening["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    last = protocol.chunk(req, "chatcmpl-1", 0, "", "length")
    assert last["choices"][0]["delta"] == {} and last["usage"] is None
    usage = protocol.usage_chunk(req, "chatcmpl-1", 0, protocol.usage(3, 4, 1))
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 7
    frame = protocol.sse(usage)
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    assert json.loads(frame[6:]) == usage
