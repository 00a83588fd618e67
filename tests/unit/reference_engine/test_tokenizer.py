from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_engine.tokenizer import BOS_ID, EOS_ID, VOCAB_SIZE, ByteTokenizer

tok = ByteTokenizer()


def test_ids_are_utf8_bytes_and_specials_sit_above_them() -> None:
    assert (BOS_ID, EOS_ID, VOCAB_SIZE) == (256, 257, 258)
    assert tok.encode("A€") == [0x41, 0xE2, 0x82, 0xAC]
    assert tok.encode("hi", add_bos=True) == [BOS_ID, ord("h"), ord("i")]


@given(st.text())
def test_encode_decode_round_trips_any_text(text: str) -> None:
    assert tok.decode(tok.encode(text, add_bos=True) + [EOS_ID]) == text


def test_decode_replaces_invalid_utf8_and_drops_specials() -> None:
    assert tok.decode([BOS_ID, 0xFF, ord("a"), EOS_ID]) == "\ufffda"
    assert tok.token_bytes(EOS_ID) == b""
    assert tok.token_bytes(0xE2) == b"\xe2"


@pytest.mark.parametrize("bad", [-1, VOCAB_SIZE])
def test_out_of_vocabulary_ids_are_rejected(bad: int) -> None:
    with pytest.raises(ValueError, match="token_id"):
        tok.token_bytes(bad)


def test_chat_template_renders_every_turn_and_opens_the_assistant_turn() -> None:
    prompt = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    assert prompt == (
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_chat_template_accepts_text_content_parts() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert "\n\nab<|eot_id|>" in tok.apply_chat_template([{"role": "user", "content": parts}])


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([], "messages"),
        ([{"content": "x"}], r"messages\[0\]\.role"),
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": 3}], r"messages\[1\]\.content"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], r"messages\[0\]\.content\[0\]"),
        (["hello"], r"messages\[0\]"),
    ],
)
def test_bad_chat_messages_name_the_field(messages: list, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        tok.apply_chat_template(messages)
