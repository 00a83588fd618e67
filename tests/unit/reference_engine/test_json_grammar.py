"""JSON schema -> byte grammar: every masked walk spells a document of its schema."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from reference_engine.json_grammar import Matcher, SchemaError, compile_schema, pick

EOS, VOCAB = 257, 258

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
    {"type": "object", "properties": {
        "id": {"type": "string"}, "ok": {"type": "boolean"}, "none": {"type": "null"},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "number"}}}},
        "tags": {"type": "array"}, "kind": {"enum": ["a", "ab", 1, 12, True]}}},
    {"type": "array", "items": {"type": "integer"}},
    {"properties": {"nested": {"properties": {"deeper": {"type": ["string", "null"]}}}}},
]


def valid(value: Any, schema: Any) -> bool:
    """A small validator for the subset the compiler takes (no third-party dependency)."""
    if "enum" in schema:
        return value in schema["enum"] and type(value) in {type(v) for v in schema["enum"]}
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        return any(valid(value, {**schema, "type": k}) for k in kind)
    if kind == "object":
        props = schema.get("properties", {})
        return isinstance(value, dict) and set(value) == set(props) and all(
            valid(value[k], s) for k, s in props.items())
    if kind == "array":
        return isinstance(value, list) and all(valid(v, schema.get("items", {})) for v in value)
    checks = {"string": lambda v: isinstance(v, str) and v != "",
              "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
              "boolean": lambda v: isinstance(v, bool), "null": lambda v: v is None}
    return checks[kind](value)


def walk(schema: Any, rng: random.Random, ignore_eos: bool = False, limit: int = 2000) -> bytes:
    m = Matcher(compile_schema(schema))
    out = b""
    for _ in range(limit):
        tok = pick(m.bitmap(VOCAB, EOS, ignore_eos), rng.randrange(VOCAB))
        if tok == EOS:
            return out
        m.accept(tok)
        out += bytes([tok])
        if ignore_eos and m.done and out.endswith((b" ", b"\n")):
            return out
    raise AssertionError(f"no end after {limit} tokens: {out!r}")


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_every_masked_walk_is_a_document_of_its_schema(index: int) -> None:
    rng = random.Random(1000 + index)
    for _ in range(40):
        text = walk(SCHEMAS[index], rng)
        assert valid(json.loads(text), SCHEMAS[index]), text


def test_the_bitmap_has_exactly_the_allowed_bytes_and_eos_only_at_the_end() -> None:
    m = Matcher(compile_schema({"type": "object", "properties": {"b": {"type": "boolean"}}}))
    for byte in b'{"b":':
        bits = m.bitmap(VOCAB, EOS, False)
        assert [i for i in range(VOCAB) if bits >> i & 1] == [byte]
        m.accept(byte)
    assert m.bitmap(VOCAB, EOS, False) == (1 << ord("f")) | (1 << ord("t"))
    for byte in b"true}":
        m.accept(byte)
    assert m.done and m.bitmap(VOCAB, EOS, False) == 1 << EOS
    # ignore_eos (a fixed-length benchmark) keeps writing whitespace, still valid JSON
    assert m.bitmap(VOCAB, EOS, True) == (1 << 0x20) | (1 << 0x0A)


def test_with_ignore_eos_the_document_is_followed_by_whitespace_only() -> None:
    text = walk(SCHEMAS[0], random.Random(77), ignore_eos=True)
    assert valid(json.loads(text), SCHEMAS[0])


def test_a_top_level_number_may_end_after_any_digit() -> None:
    m = Matcher(compile_schema({"type": "integer"}))
    m.accept(ord("7"))
    bits = m.bitmap(VOCAB, EOS, False)
    assert bits >> EOS & 1 and bits >> ord("0") & 1
    m.accept(EOS)
    assert m.done


def test_an_enum_literal_that_prefixes_another_is_dropped_not_left_unreachable() -> None:
    (choice,) = compile_schema({"enum": [1, 12, "x"]})
    assert sorted(choice.texts) == [b'"x"', b"12"]


def test_pick_keeps_an_allowed_token_and_maps_others_deterministically() -> None:
    bits = (1 << 40) | (1 << 50) | (1 << 60)
    assert pick(bits, 50) == 50
    assert pick(bits, 7) == [40, 50, 60][7 % 3] == pick(bits, 7)


@pytest.mark.parametrize(("schema", "named"), [
    ({"anyOf": [{"type": "string"}]}, "anyOf"),
    ({"type": "object", "properties": {"a": {"$ref": "#/x"}}}, "$ref"),
    ({"type": "tuple"}, "tuple"),
    ([1, 2], "list"),
])
def test_unsupported_schemas_are_refused_naming_the_keyword(schema: Any, named: str) -> None:
    with pytest.raises(SchemaError, match=named.replace("$", r"\$")):
        compile_schema(schema)


def test_accepting_a_byte_outside_the_mask_is_an_error() -> None:
    m = Matcher(compile_schema({"type": "string"}))
    with pytest.raises(ValueError, match="not allowed"):
        m.accept(ord("x"))
