"""A tolerant reader for the Python reprs and JSON that engines print in their logs.

vLLM prints its resolved configuration as `key=value, key=value` with unquoted strings
(`tokenizer_mode=auto`, `quantization=compressed-tensors`), Python reprs of nested dicts,
dataclass reprs (`DecodingConfig(backend='auto')`), enums (`<CUDAGraphMode.PIECEWISE: 1>`)
and, in some versions, a JSON `compilation_config`. SGLang prints `ServerArgs(k=v, ...)`.
None of it may be `eval`ed: it is text from a log someone attached, and enum reprs are not
valid Python anyway. This module reads that grammar and nothing more; anything it cannot
read raises `ReprError` with the offset, so the caller can name the line and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


class ReprError(ValueError):
    """The text is not a value this reader knows; `offset` is where it stopped. Offsets in
    the message read `offset N`; `in_columns` restates them as columns of the source line."""

    def __init__(self, message: str, offset: int, truncated: bool = False) -> None:
        super().__init__(message)
        self.offset = offset
        self.truncated = truncated  # the text ended inside a value (a cut log line)

    def in_columns(self, start: int) -> str:
        """The message with every offset given as a 1-based column of a line in which the
        parsed text began at index `start`."""
        return re.sub(r"offset (\d+)", lambda m: f"column {start + int(m.group(1)) + 1}", str(self))


@dataclass(frozen=True)
class EnumValue:
    """`<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>`: the member and its value."""

    name: str  # "CUDAGraphMode.FULL_AND_PIECEWISE"
    value: Any

    @property
    def member(self) -> str:
        return self.name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Call:
    """`Name(a, k=v)`: a dataclass or namedtuple repr."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_ENUM_OPEN = re.compile(r"<([A-Za-z_][\w.]*)\s*:\s*")
_BARE = re.compile(r"[^\s,()\[\]{}<>'\"=]+")
_KWARG = re.compile(r"([A-Za-z_]\w*)\s*=(?!=)")
_CONSTS = {"True": True, "False": False, "None": None, "true": True, "false": False,
           "null": None, "inf": float("inf"), "nan": float("nan")}
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"',
            "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, message: str, at: int | None = None) -> ReprError:
        at = self.pos if at is None else at
        return ReprError(message, at, truncated=at >= len(self.text))

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, ch: str, opened: int) -> None:
        self.ws()
        if self.pos >= len(self.text):
            raise self.fail(f"text ends before the {ch!r} closing the value opened at offset {opened}")
        if self.text[self.pos] != ch:
            raise self.fail(f"expected {ch!r} (closing the value opened at offset {opened}), "
                            f"found {self.text[self.pos]!r}")
        self.pos += 1

    def value(self) -> Any:
        self.ws()
        c = self.peek()
        if not c:
            raise self.fail("a value was expected, the text ends")
        if c in "'\"":
            return self.string()
        if c == "{":
            return self.mapping()
        if c == "[":
            return list(self.sequence("[", "]"))
        if c == "(":
            return tuple(self.sequence("(", ")"))
        if c == "<":
            return self.enum()
        m = _NUMBER.match(self.text, self.pos)
        bare = _BARE.match(self.text, self.pos)
        if m and (bare is None or bare.end() == m.end()):  # `12.2.140` is text, not a number
            self.pos = m.end()
            text = m.group(0)
            return float(text) if any(x in text for x in ".eE") else int(text)
        m = _IDENT.match(self.text, self.pos)
        if m:
            name = m.group(0)
            after = m.end()
            if after < len(self.text) and self.text[after] == "(":
                self.pos = after
                return self.call(name)
            assert bare is not None
            self.pos = bare.end()
            return _CONSTS.get(bare.group(0), bare.group(0))
        m = _BARE.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return m.group(0)
        raise self.fail(f"unexpected {c!r}")

    def string(self) -> str:
        quote, start = self.text[self.pos], self.pos
        self.pos += 1
        out: list[str] = []
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == quote:
                self.pos += 1
                return "".join(out)
            if c == "\\" and self.pos + 1 < len(self.text):
                nxt = self.text[self.pos + 1]
                if nxt in "xuU":
                    width = {"x": 2, "u": 4, "U": 8}[nxt]
                    digits = self.text[self.pos + 2:self.pos + 2 + width]
                    if len(digits) == width and all(d in "0123456789abcdefABCDEF" for d in digits):
                        out.append(chr(int(digits, 16)))
                        self.pos += 2 + width
                        continue
                out.append(_ESCAPES.get(nxt, "\\" + nxt))
                self.pos += 2
                continue
            out.append(c)
            self.pos += 1
        raise self.fail(f"string opened at offset {start} is never closed")

    def sequence(self, open_: str, close: str) -> list[Any]:
        start = self.pos
        self.pos += 1
        items: list[Any] = []
        while True:
            self.ws()
            if self.peek() == close:
                self.pos += 1
                return items
            items.append(self.value())
            self.ws()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect(close, start)
            return items

    def mapping(self) -> dict[Any, Any]:
        start = self.pos
        self.pos += 1
        out: dict[Any, Any] = {}
        while True:
            self.ws()
            if self.peek() == "}":
                self.pos += 1
                return out
            key = self.value()
            self.expect(":", start)
            out[_hashable(key)] = self.value()
            self.ws()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}", start)
            return out

    def enum(self) -> EnumValue:
        start = self.pos
        m = _ENUM_OPEN.match(self.text, self.pos)
        if not m:
            raise self.fail("'<' that does not open an enum like <Mode.NAME: 1>")
        self.pos = m.end()
        value = self.value()
        self.expect(">", start)
        return EnumValue(m.group(1), value)

    def call(self, name: str) -> Call:
        start = self.pos
        self.pos += 1
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        while True:
            self.ws()
            if self.peek() == ")":
                self.pos += 1
                return Call(name, tuple(args), kwargs)
            m = _KWARG.match(self.text, self.pos)
            if m:
                self.pos = m.end()
                kwargs[m.group(1)] = self.value()
            else:
                args.append(self.value())
            self.ws()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect(")", start)
            return Call(name, tuple(args), kwargs)


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(key)
    if isinstance(key, dict | Call):
        return repr(key)
    return key


def parse_value(text: str) -> Any:
    """One whole value (a dict, a call, a list...); trailing text is an error."""
    r = _Reader(text)
    v = r.value()
    r.ws()
    if r.pos != len(text):
        raise r.fail(f"unexpected {text[r.pos]!r} after the value")
    return v


_NEXT_KEY = re.compile(r",\s*([A-Za-z_]\w*)=")
_KEY = re.compile(r"\s*([A-Za-z_]\w*)=")


def _value_end(s: str, i: int) -> int:
    """Where a `key=value` list's value that starts at `i` ends: the next `, name=` outside any
    bracket or string. Raises on a bracket closed by the wrong kind or never closed."""
    stack: list[tuple[str, int]] = []
    n = len(s)
    while i < n:
        c = s[i]
        if c in "'\"":
            j = i + 1
            while j < n and s[j] != c:
                j += 2 if s[j] == "\\" else 1
            if j >= n:
                raise ReprError(f"string opened at offset {i} is never closed", n, truncated=True)
            i = j + 1
            continue
        if c in "([{":
            stack.append((c, i))
        elif c == "<" and _ENUM_OPEN.match(s, i):
            stack.append(("<", i))
        elif c in ")]}>":
            if stack and {"(": ")", "[": "]", "{": "}", "<": ">"}[stack[-1][0]] == c:
                stack.pop()
            elif c != ">":
                if not stack:
                    return i  # a closer of an enclosing text (the V0 line ends with ')')
                raise ReprError(f"{c!r} closes the {stack[-1][0]!r} opened at offset "
                                f"{stack[-1][1]}", i)
        elif c == "," and not stack and _NEXT_KEY.match(s, i):
            return i
        i += 1
    if stack:
        raise ReprError(f"text ends inside the {stack[-1][0]!r} opened at offset {stack[-1][1]}",
                        n, truncated=True)
    return n


def parse_kv_list(text: str) -> list[tuple[str, Any, int]]:
    """`a=1, b=auto, c={'x': <E.Y: 1>}` -> [(key, value, offset)], values parsed where they
    are values this reader knows and kept as the bare text otherwise (`cuda:1`)."""
    out: list[tuple[str, Any, int]] = []
    i, n = 0, len(text)
    while i < n:
        m = _KEY.match(text, i)
        if not m:
            rest = text[i:].strip()
            if rest in ("", ")"):
                break
            raise ReprError(f"expected name=value, found {text[i:i + 20]!r}", i)
        start = m.end()
        end = _value_end(text, start)
        raw = text[start:end].strip()
        try:
            value = parse_value(raw) if raw else ""
        except ReprError:
            value = raw  # an unquoted string such as `compressed-tensors` or `cuda:1`
        out.append((m.group(1), value, start))
        i = end + 1 if end < n and text[end] == "," else end
        if end < n and text[end] != ",":
            if text[end:].strip() != ")":
                raise ReprError(f"unexpected {text[end]!r}", end)
            break
    return out
