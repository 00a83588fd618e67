"""The forms of a structured-output request vLLM's OpenAI server takes, and their refusals."""

from __future__ import annotations

from typing import Any

import pytest

from reference_engine.protocol import ApiError, parse_chat, parse_completion

S = {"type": "object", "properties": {"city": {"type": "string"}}}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("extra", [
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": S}}},
    {"structured_outputs": {"json": S}},
    {"guided_json": S},
    {"guided_json": '{"type": "object", "properties": {"city": {"type": "string"}}}'},
])
def test_each_form_gives_the_schema(extra: dict[str, Any]) -> None:
    assert parse_chat({**CHAT, **extra}).json_schema == S
    assert parse_completion({"model": "m", "prompt": "p", **extra}).json_schema == S


def test_json_object_is_any_object_and_text_is_unconstrained() -> None:
    assert parse_chat({**CHAT, "response_format": {"type": "json_object"}}).json_schema == {
        "type": "object"}
    assert parse_chat({**CHAT, "response_format": {"type": "text"}}).json_schema is None
    assert parse_chat(CHAT).json_schema is None


@pytest.mark.parametrize(("extra", "param", "says"), [
    ({"response_format": {"type": "xml"}}, "response_format", "must be text, json_object"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", "schema' is required"),
    ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
    ({"guided_json": {"oneOf": []}}, "guided_json", "'oneOf' is not supported"),
    ({"guided_json": S, "structured_outputs": {"json": S}}, "guided_json", "not several"),
])
def test_bad_forms_are_a_400_naming_the_field(extra: dict[str, Any], param: str, says: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_chat({**CHAT, **extra})
    assert err.value.status == 400 and err.value.param == param and says in err.value.message
