"""A JSON schema compiled to a byte-level grammar, and the matcher that masks each step.

The reference engine's vocabulary is bytes (tokenizer.py), so a grammar over bytes is a
grammar over tokens. A schema is compiled to a flat list of pieces that spell one JSON
document of that schema:

- `Lit(text)`: bytes that must come next (`{"name":`, `,`, `]`);
- `Choice(texts)`: exactly one of several literals (`true`/`false`, an `enum`);
- `Run(alphabet, lo, hi)`: between lo and hi bytes from an alphabet (a string's characters,
  an integer's digits), ended by whatever the next piece allows.

Objects write every property in the schema's order; arrays write one item; a string holds
1..STRING_MAX letters, digits or spaces. That is a subset of what xgrammar or llguidance
accept (no `$ref`, `anyOf`, `pattern`, free-form objects), enough for every document to
parse with `json.loads` and match its schema, which is what the tests check. Keys outside
the subset are refused at compile time with their name, as vLLM refuses a schema its backend
cannot take.

A `Matcher` holds one sequence's position; `allowed()` is the set of next bytes and
`bitmap()` the same set as a bitmap over the vocabulary (bit i set = token i allowed), as
xgrammar's `fill_next_token_bitmask` fills one row of int32 words per sequence.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from typing import Any

STRING_MAX = 12
INT_DIGITS_MAX = 6
STRING_ALPHABET = frozenset((string.ascii_letters + string.digits + " ").encode())
DIGITS = frozenset(b"0123456789")
# Schema keywords the compiler reads or may ignore (annotations, constraints it does not
# enforce); anything else is refused, so a test never passes on a keyword silently dropped.
_KNOWN = {"type", "properties", "required", "items", "enum", "title", "description",
          "additionalProperties", "minLength", "maxLength", "minimum", "maximum", "format",
          "default", "examples", "$schema", "minItems", "maxItems"}


class SchemaError(ValueError):
    """The schema is not one this grammar compiler takes; the message names the keyword."""


@dataclass(frozen=True)
class Lit:
    text: bytes


@dataclass(frozen=True)
class Choice:
    texts: tuple[bytes, ...]


@dataclass(frozen=True)
class Run:
    alphabet: frozenset[int]
    lo: int
    hi: int
    first: frozenset[int] | None = None  # the first byte's alphabet, where it differs


Piece = Lit | Choice | Run


def _lit(text: str) -> Lit:
    return Lit(text.encode())


def _value(schema: Any, path: str) -> list[Piece]:
    if schema is True or schema == {}:
        schema = {"type": "string"}  # any value: one the template can always write
    if not isinstance(schema, dict):
        raise SchemaError(f"{path}: a schema must be an object or true, got {type(schema).__name__}")
    unknown = sorted(set(schema) - _KNOWN)
    if unknown:
        raise SchemaError(f"{path}: schema keyword {unknown[0]!r} is not supported")
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{path}.enum: must be a non-empty list")
        texts = {json.dumps(v, separators=(",", ":")).encode() for v in values}
        # A literal that is a proper prefix of another (1 and 12) would need lookahead to
        # end; keep the longer ones.
        kept = sorted(t for t in texts if not any(o != t and o.startswith(t) for o in texts))
        return [Choice(tuple(kept))]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise SchemaError(f"{path}.properties: must be an object")
        pieces: list[Piece] = [_lit("{")]
        for i, (name, sub) in enumerate(props.items()):
            pieces.append(_lit(("," if i else "") + json.dumps(name) + ":"))
            pieces += _value(sub, f"{path}.{name}")
        return [*pieces, _lit("}")]
    if kind == "array":
        items = schema.get("items")
        if items is None:
            return [_lit("[]")]
        return [_lit("["), *_value(items, f"{path}[]"), _lit("]")]
    if kind == "string":
        return [_lit('"'), Run(STRING_ALPHABET, 1, STRING_MAX), _lit('"')]
    if kind in ("integer", "number"):
        return [Run(DIGITS, 1, INT_DIGITS_MAX, first=DIGITS - {ord("0")})]
    if kind == "boolean":
        return [Choice((b"false", b"true"))]
    if kind == "null":
        return [_lit("null")]
    raise SchemaError(f"{path}.type: {kind!r} is not a JSON schema type")


def compile_schema(schema: Any) -> tuple[Piece, ...]:
    """The pieces of one document of `schema`, adjacent literals merged."""
    merged: list[Piece] = []
    for piece in _value(schema, "$"):
        if isinstance(piece, Lit) and merged and isinstance(merged[-1], Lit):
            merged[-1] = Lit(merged[-1].text + piece.text)
        else:
            merged.append(piece)
    return tuple(merged)


class Matcher:
    """One sequence's place in a compiled grammar. Owned by the engine thread."""

    __slots__ = ("pieces", "index", "offset", "prefix")

    def __init__(self, pieces: tuple[Piece, ...]) -> None:
        self.pieces = pieces
        self.index = 0      # current piece
        self.offset = 0     # bytes of the current piece written (Lit, Run)
        self.prefix = b""   # bytes of the current Choice written

    @property
    def done(self) -> bool:
        return self.index >= len(self.pieces)

    def can_end(self) -> bool:
        """The bytes so far are a whole document (a top-level number may stop or go on)."""
        if self.done:
            return True
        p = self.pieces[self.index]
        return self.index == len(self.pieces) - 1 and isinstance(p, Run) and self.offset >= p.lo

    def _starts(self, index: int) -> set[int]:
        """Bytes that can begin piece `index` (a Run of lo=0 is never built)."""
        if index >= len(self.pieces):
            return set()
        p = self.pieces[index]
        if isinstance(p, Lit):
            return {p.text[0]}
        if isinstance(p, Choice):
            return {t[0] for t in p.texts}
        return set(p.first if p.first is not None else p.alphabet)

    def allowed(self) -> set[int]:
        """Next bytes the grammar accepts; empty once the document is complete."""
        if self.done:
            return set()
        p = self.pieces[self.index]
        if isinstance(p, Lit):
            return {p.text[self.offset]}
        if isinstance(p, Choice):
            n = len(self.prefix)
            return {t[n] for t in p.texts if t.startswith(self.prefix) and len(t) > n}
        out: set[int] = set()
        if self.offset < p.hi:
            out |= p.first if (self.offset == 0 and p.first is not None) else p.alphabet
        if self.offset >= p.lo:
            out |= self._starts(self.index + 1)
        return out

    def accept(self, byte: int) -> None:
        """Advance by one token the mask allowed (a byte, or EOS/whitespace once the document
        can end, which closes it); anything else is a bug in the caller."""
        if byte not in self.allowed():
            if self.can_end():
                self.index = len(self.pieces)
                return
            raise ValueError(f"byte {byte} is not allowed at piece {self.index}")
        p = self.pieces[self.index]
        if isinstance(p, Lit):
            self.offset += 1
            if self.offset == len(p.text):
                self._next()
        elif isinstance(p, Choice):
            self.prefix += bytes([byte])
            if self.prefix in p.texts:
                self._next()
        elif self.offset < p.hi and byte in (p.first if (self.offset == 0 and p.first is not None)
                                             else p.alphabet):
            self.offset += 1
        else:
            # The run ended: the byte belongs to the next piece.
            self._next()
            self.accept(byte)

    def _next(self) -> None:
        self.index += 1
        self.offset = 0
        self.prefix = b""

    def bitmap(self, vocab_size: int, eos_id: int, ignore_eos: bool) -> int:
        """The allowed set as a bitmap over the vocabulary. A complete document allows EOS
        only; with ignore_eos (a benchmark that wants a fixed length) it allows whitespace,
        which json.loads accepts after a document."""
        allowed = self.allowed()
        if self.can_end():
            allowed |= {0x20, 0x0A} if ignore_eos else {eos_id}
        bits = 0
        for tok in allowed:
            if tok < vocab_size:
                bits |= 1 << tok
        return bits


def pick(bits: int, sampled: int) -> int:
    """The token to emit under a mask: the sampled one if allowed, else the allowed token at
    the sampled id's rank among them (deterministic, so greedy output stays reproducible)."""
    if bits >> sampled & 1:
        return sampled
    allowed = [i for i in range(bits.bit_length()) if bits >> i & 1]
    return allowed[sampled % len(allowed)]
