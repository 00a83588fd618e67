from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_engine.detokenizer import IncrementalDetokenizer, reference_decode
from reference_engine.tokenizer import EOS_ID, ByteTokenizer

tok = ByteTokenizer()


def stream(
    ids: list[int], cuts: list[int], stop: list[str], include: bool = False
) -> tuple[list[str], IncrementalDetokenizer]:
    """Push ``ids`` in chunks split at ``cuts``; return every piece sent (flush last)."""
    detok = IncrementalDetokenizer(tok, stop=stop, include_stop_str_in_output=include)
    bounds = [0, *sorted(set(cuts)), len(ids)]
    pieces = [detok.push(ids[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    pieces.append(detok.flush())
    return pieces, detok


def test_emoji_split_across_byte_tokens_is_held_until_complete() -> None:
    detok = IncrementalDetokenizer(tok)
    ids = tok.encode("a😀b")  # 😀 is four bytes
    assert detok.push(ids[:2]) == "a"
    assert detok.push(ids[2:4]) == ""
    assert detok.push(ids[4:5]) == "😀"
    assert detok.push(ids[5:]) == "b"
    assert detok.flush() == ""


def test_euro_sign_one_byte_per_push_appears_only_whole() -> None:
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push([b]) for b in tok.encode("€")]
    assert pieces == ["", "", "€"]


def test_unfinished_character_becomes_replacement_only_at_flush() -> None:
    detok = IncrementalDetokenizer(tok)
    assert detok.push(tok.encode("x€")[:-1]) == "x"
    assert detok.flush() == "\ufffd"


def test_stop_string_split_across_tokens_is_never_partly_sent() -> None:
    detok = IncrementalDetokenizer(tok, stop=["STOP"])
    assert detok.push(tok.encode("ok S")) == "ok "
    assert detok.push(tok.encode("TO")) == ""
    assert detok.push(tok.encode("P and more")) == ""
    assert detok.stopped and detok.stop_reason == "STOP"
    assert detok.push(tok.encode("later")) == ""
    assert detok.flush() == ""


def test_held_prefix_is_released_when_it_stops_matching() -> None:
    detok = IncrementalDetokenizer(tok, stop=["Hello"])
    assert detok.push(tok.encode("Hel")) == ""
    assert detok.push(tok.encode("p!")) == "Help!"
    assert not detok.stopped


def test_held_prefix_is_released_at_flush_when_the_output_ends() -> None:
    detok = IncrementalDetokenizer(tok, stop=["</s>"])
    assert detok.push(tok.encode("done</")) == "done"
    assert detok.flush() == "</"


def test_include_stop_str_keeps_the_stop_and_nothing_after() -> None:
    pieces, _ = stream(tok.encode("abc<END>zzz"), [4, 6], ["<END>"], include=True)
    assert "".join(pieces) == "abc<END>"


def test_stop_that_ends_first_wins_over_one_that_starts_first() -> None:
    # "bc" is complete before "abcd" can be; a streaming engine stops at "bc".
    pieces, detok = stream(tok.encode("abcd"), [1, 2, 3], ["abcd", "bc"])
    assert "".join(pieces) == "a" == reference_decode(tok, tok.encode("abcd"), ["abcd", "bc"])
    assert detok.stop_reason == "bc"


def test_special_tokens_produce_no_text() -> None:
    detok = IncrementalDetokenizer(tok)
    assert detok.push([EOS_ID, *tok.encode("x")]) == "x"


@pytest.mark.parametrize("bad", [[""], [3]])
def test_bad_stop_strings_are_rejected(bad: list) -> None:
    with pytest.raises(ValueError, match=r"stop\[0\]"):
        IncrementalDetokenizer(tok, stop=bad)


_valid_chars = st.characters(exclude_characters="\ufffd", codec="utf-8")


@st.composite
def text_and_stops(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.text(alphabet=_valid_chars, max_size=40))
    stops: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        if text and draw(st.booleans()):
            # A substring of the text, so stops really occur (often across tokens).
            a = draw(st.integers(0, len(text) - 1))
            b = draw(st.integers(a + 1, min(len(text), a + 5)))
            stops.append(text[a:b])
        else:
            stops.append(draw(st.text(alphabet=_valid_chars, min_size=1, max_size=4)))
    return text, stops


@settings(max_examples=300, deadline=None)
@given(text_and_stops(), st.lists(st.integers(0, 200)), st.booleans())
def test_streamed_text_equals_whole_output_decode(
    case: tuple[str, list[str]], cuts: list[int], include: bool
) -> None:
    text, stop = case
    ids = tok.encode(text)
    pieces, _ = stream(ids, [c for c in cuts if c <= len(ids)], stop, include)
    assert "".join(pieces) == reference_decode(tok, ids, stop, include)
    assert not any("\ufffd" in piece for piece in pieces)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.lists(st.integers(0, 40)), st.lists(st.text(min_size=1, max_size=3), max_size=2))
def test_arbitrary_bytes_stream_like_the_whole_decode(
    raw: bytes, cuts: list[int], stop: list[str]
) -> None:
    ids = list(raw)
    pieces, _ = stream(ids, [c for c in cuts if c <= len(ids)], stop)
    assert "".join(pieces) == reference_decode(tok, ids, stop)
    if "\ufffd" not in raw.decode("utf-8", errors="replace"):
        assert not any("\ufffd" in piece for piece in pieces)
