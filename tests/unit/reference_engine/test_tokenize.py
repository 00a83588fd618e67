"""POST /tokenize requests (vLLM's shape): what is accepted, the defaults that make the count
the completion's, and the field named when a request is refused."""

from __future__ import annotations

from typing import Any

import pytest

from reference_engine import protocol
from reference_engine.protocol import ApiError
from reference_engine.tokenizer import ByteTokenizer


def test_prompt_and_messages_forms_with_the_completion_defaults() -> None:
    req = protocol.parse_tokenize({"model": "m", "prompt": "hello"})
    assert (req.prompt, req.messages, req.add_special_tokens) == ("hello", None, True)
    chat = protocol.parse_tokenize({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.messages == [{"role": "user", "content": "hi"}] and chat.add_generation_prompt
    off = protocol.parse_tokenize({"model": "m", "prompt": "x", "add_special_tokens": False})
    assert off.add_special_tokens is False


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "x"}, "model"),
    ({"model": 3, "prompt": "x"}, "model"),
    ({"model": "m"}, None),
    ({"model": "m", "prompt": "x", "messages": []}, None),
    ({"model": "m", "prompt": [1, 2]}, "prompt"),
    ({"model": "m", "messages": []}, "messages"),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1},
     "add_generation_prompt"),
])
def test_bad_requests_are_400_naming_the_field(body: dict[str, Any], param: str | None) -> None:
    with pytest.raises(ApiError) as exc:
        protocol.parse_tokenize(body)
    assert exc.value.status == 400 and exc.value.param == param


def test_template_without_generation_prompt_is_shorter_by_its_header() -> None:
    tok = ByteTokenizer()
    msgs = [{"role": "user", "content": "two words"}]
    with_prompt = tok.apply_chat_template(msgs, add_generation_prompt=True)
    without = tok.apply_chat_template(msgs, add_generation_prompt=False)
    assert with_prompt.startswith(without) and len(with_prompt) - len(without) == len(
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
