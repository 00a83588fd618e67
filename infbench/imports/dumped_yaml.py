"""The YAML that PyYAML's `yaml.dump` writes for JSON data: guidellm's `benchmarks.yaml`.

guidellm 0.8 saves a report as `yaml.dump(report.model_dump(mode="json"))`: block mappings
(keys sorted, plain or quoted), block sequences (a mapping's list at the key's own indent),
`[]` and `{}` for empty ones, and scalars that are plain, 'single-' or "double-quoted"
(escapes), any of them folded over several lines when long. Read here exactly as PyYAML's
`safe_load` would read them, without a YAML dependency: plain scalars resolve as YAML 1.1
does (`null`/`~`, `true`/`yes`/`on`..., decimal integers, floats with a dot, `.inf`, `.nan`).
What `yaml.dump` never writes for JSON data (anchors, aliases, tags, block scalars, `?` keys,
non-empty flow collections, octal/hex/sexagesimal numbers, dates, several documents) is
refused with its line, so a file is read exactly or not at all.
"""

from __future__ import annotations

import re
from typing import Any


class DumpedYamlError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line, self.message = line, message


_NULL = {"", "~", "null", "Null", "NULL"}
_TRUE = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}
_FALSE = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9_]*)")
# PyYAML's float resolver: a dot is required (`1e5` is a string to it).
_FLOAT = re.compile(r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?")
_INF = re.compile(r"[-+]?\.(?:inf|Inf|INF)")
_NAN = re.compile(r"\.(?:nan|NaN|NAN)")
# Other implicit types PyYAML resolves, which `yaml.dump` never leaves plain for JSON data.
_OTHER_INT = re.compile(r"[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+")
_OTHER_FLOAT = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:.*)?")
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
            "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85",
            "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_HEX = {"x": 2, "u": 4, "U": 8}


_DOCUMENT = re.compile(r"(?:---|\.\.\.)(?:[ \t]|$)")


def _complex(text: str) -> bool:
    return text == "?" or text.startswith("? ")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _blank(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("#")


def plain_value(text: str, line: int) -> Any:
    """A plain scalar as PyYAML's SafeLoader resolves it."""
    if text in _NULL:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if _DECIMAL.fullmatch(text):
        return int(text.replace("_", ""))
    if _FLOAT.fullmatch(text):
        return float(text.replace("_", ""))
    if _INF.fullmatch(text):
        return float("-inf") if text.startswith("-") else float("inf")
    if _NAN.fullmatch(text):
        return float("nan")
    if _OTHER_INT.fullmatch(text) or _OTHER_FLOAT.fullmatch(text):
        raise DumpedYamlError(line, f"{text[:30]!r}: octal, binary, hex and base-60 numbers are not read")
    if _TIMESTAMP.fullmatch(text):
        raise DumpedYamlError(line, f"{text[:30]!r}: an unquoted date is not read (quote it)")
    if text in ("=", "<<"):
        raise DumpedYamlError(line, f"{text!r}: YAML's value and merge keys are not read")
    return text


class _Reader:
    def __init__(self, text: str) -> None:
        self.lines = text.replace("\r\n", "\n").split("\n")

    def skip(self, i: int) -> int:
        while i < len(self.lines) and _blank(self.lines[i]):
            i += 1
        return i

    def refuse_indicator(self, i: int, text: str) -> None:
        c = text[0]
        what = {"&": "an anchor", "*": "an alias", "!": "a tag", "|": "a block scalar", ">": "a block scalar",
                "?": "a complex key", "%": "a directive", "@": "a reserved indicator", "`": "a reserved indicator"}
        if c in what and (c not in "?" or text == "?" or text.startswith("? ")):
            raise DumpedYamlError(i + 1, f"{text[:30]!r}: {what[c]} is not read")
        if c in "[{" and text not in ("[]", "{}"):
            raise DumpedYamlError(i + 1, f"{text[:30]!r}: a flow collection other than [] or {{}} is not read")

    def node(self, i: int, col: int, parent: int) -> tuple[Any, int]:
        """The node whose text starts at line i, column col (maybe after a `- ` on that line),
        inside a block indented `parent`; returns it and the next line to read."""
        text = self.lines[i][col:]
        if text == "-" or text.startswith("- "):
            return self.sequence(i, col)
        if self.key(i, col) is not None or _complex(text):
            return self.mapping(i, col)
        return self.scalar(i, col, parent)

    def _deeper(self, i: int, col: int, what: str) -> None:
        if i < len(self.lines) and _indent(self.lines[i]) > col:
            raise DumpedYamlError(i + 1, f"{self.lines[i].strip()[:30]!r} is indented deeper than the {what} around it")

    def sequence(self, i: int, col: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        first = True
        while i < len(self.lines):
            line = self.lines[i]
            if (not first and (_indent(line) != col or _DOCUMENT.match(line))) or not (line[col:] == "-" or line[col:].startswith("- ")):
                break
            first = False
            rest = line[col + 1:]
            if rest.strip() and not rest.strip().startswith("#"):
                value, i = self.node(i, col + 1 + _indent(rest), col)
            else:
                j = self.skip(i + 1)
                if j < len(self.lines) and _indent(self.lines[j]) > col:
                    value, i = self.node(j, _indent(self.lines[j]), col)
                else:
                    value, i = None, i + 1
            out.append(value)
            i = self.skip(i)
        self._deeper(i, col, "list")
        return out, i

    def key(self, i: int, col: int) -> tuple[Any, int] | None:
        """(key, column after its `:`) when line i at col starts a `key:` entry, else None."""
        text = self.lines[i][col:]
        if not text:
            return None
        if text[0] in "'\"":
            try:
                value, end_line, end = self.quoted(i, col, single_line=True)
            except DumpedYamlError:
                return None
            rest = self.lines[i][end:]
            if end_line == i and (rest == ":" or rest.startswith(": ")):
                return value, end + 1
            return None
        if text[0] in "-?:" and (len(text) == 1 or text[1] == " "):
            return None
        if text[0] in ",[]{}#&*!|>%@`":
            return None
        m = re.match(r"(.*?):(?: |$)", text)
        if not m or re.search(r"\s#", m.group(1)):  # none, or a comment starts before it
            return None
        return plain_value(m.group(1).rstrip(), i + 1), col + len(m.group(1)) + 1

    def mapping(self, i: int, col: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        first = True
        while i < len(self.lines):
            line = self.lines[i]
            if not first and (_indent(line) != col or _DOCUMENT.match(line)):
                break
            first = False
            if _complex(line[col:]):  # `? key` then `: value`: keys that are empty or long
                key, i, after = self.complex_key(i, col)
                line = self.lines[i]
            else:
                found = self.key(i, col)
                if found is None:
                    raise DumpedYamlError(i + 1, f"{line.strip()[:30]!r} is not `key: value`")
                key, after = found
            if not isinstance(key, str):
                raise DumpedYamlError(i + 1, f"key {key!r} is not a string (a JSON report's keys are)")
            if key in out:
                raise DumpedYamlError(i + 1, f"key {key!r} appears twice")
            rest = line[after:]
            if rest.strip() and not rest.strip().startswith("#"):
                at = after + _indent(rest)
                out[key], i = self.node(i, at, col) if line[col] == ":" else self.scalar(i, at, col)
            else:
                j = self.skip(i + 1)
                nxt = self.lines[j] if j < len(self.lines) else ""
                if j < len(self.lines) and (_indent(nxt) > col or
                                            (_indent(nxt) == col and (nxt[col:] == "-" or nxt[col:].startswith("- ")))):
                    out[key], i = self.node(j, _indent(nxt), col)
                else:
                    out[key], i = None, i + 1
            i = self.skip(i)
        self._deeper(i, col, "keys")
        return out, i

    def complex_key(self, i: int, col: int) -> tuple[Any, int, int]:
        """`? key` at line i, column col, and the `:` line after it: (the key, the `:` line,
        the column after its `:`)."""
        rest = self.lines[i][col + 1:]
        if not rest.strip() or rest.strip().startswith("#"):
            raise DumpedYamlError(i + 1, "a `?` key with nothing after it is not read")
        key, j = self.scalar(i, col + 1 + _indent(rest), col)
        j = self.skip(j)
        if j >= len(self.lines) or _indent(self.lines[j]) != col or not (
                self.lines[j][col:] == ":" or self.lines[j][col:].startswith(": ")):
            raise DumpedYamlError(i + 1, "a `?` key without its `:` line below it")
        return key, j, col + 1

    def scalar(self, i: int, col: int, parent: int) -> tuple[Any, int]:
        text = self.lines[i][col:]
        self.refuse_indicator(i, text)
        if text.rstrip() in ("[]", "{}"):
            return ([] if text.rstrip() == "[]" else {}), i + 1
        if text[0] in "'\"":
            value, end_line, end = self.quoted(i, col, single_line=False)
            rest = self.lines[end_line][end:].strip()
            if rest and not rest.startswith("#"):
                raise DumpedYamlError(end_line + 1, f"{rest[:30]!r} after a quoted string")
            return value, end_line + 1
        parts = [self._plain_part(i, text)]
        j = i
        while True:  # continuation lines: deeper than the block; blank lines between are newlines
            k = j + 1
            while k < len(self.lines) and not self.lines[k].strip():
                k += 1
            if k >= len(self.lines) or _indent(self.lines[k]) <= parent or self.lines[k].strip().startswith("#") \
                    or _DOCUMENT.match(self.lines[k]):
                break
            parts.append("\n" * (k - j - 1) if k - j > 1 else " ")
            parts.append(self._plain_part(k, self.lines[k].strip()))
            j = k
        return plain_value("".join(parts), i + 1), j + 1

    @staticmethod
    def _plain_part(i: int, text: str) -> str:
        m = re.search(r"\s#", text)
        text = (text[:m.start()] if m else text).strip()
        if ": " in text or text.endswith(":"):
            raise DumpedYamlError(i + 1, f"{text[:30]!r}: a plain string with ': ' is not YAML")
        return text

    def _fold(self, i: int) -> tuple[int, str]:
        """After a line break inside a quoted string at line i: the next line with text and
        what the break folds to (one break: a space; n blank lines: n newlines)."""
        j, empty = i + 1, 0
        while j < len(self.lines) and not self.lines[j].strip():
            j, empty = j + 1, empty + 1
        if j >= len(self.lines):
            raise DumpedYamlError(i + 1, "the quoted string is never closed")
        return j, "\n" * empty if empty else " "

    def quoted(self, i: int, col: int, single_line: bool) -> tuple[str, int, int]:
        """A quoted scalar starting at line i, column col: (value, last line, column after
        the closing quote)."""
        quote = self.lines[i][col]
        out: list[str] = []
        kept = 0  # out[:kept] is never stripped (escapes, text before them)
        pos, line = col + 1, self.lines[i]
        while True:
            if pos >= len(line):
                if single_line:
                    raise DumpedYamlError(i + 1, f"the quoted string {line[col:col + 30]!r} is never closed")
                while len(out) > kept and out[-1] in (" ", "\t"):
                    out.pop()
                i, fold = self._fold(i)
                out.append(fold)
                kept = len(out)
                line = self.lines[i]
                pos = len(line) - len(line.lstrip(" \t"))
                continue
            c = line[pos]
            if c == quote:
                if quote == "'" and line[pos + 1:pos + 2] == "'":
                    out.append("'")
                    pos += 2
                    continue
                return "".join(out), i, pos + 1
            if quote == '"' and c == "\\":
                if pos + 1 >= len(line):  # an escaped line break: joined with nothing between
                    if single_line:
                        raise DumpedYamlError(i + 1, "a key continued on the next line is not read")
                    i, fold = self._fold(i)
                    out.append("" if fold == " " else fold)
                    kept = len(out)
                    line = self.lines[i]
                    pos = len(line) - len(line.lstrip(" \t"))
                    continue
                e = line[pos + 1]
                if e in _ESCAPES:
                    out.append(_ESCAPES[e])
                    pos += 2
                elif e in _HEX:
                    digits = line[pos + 2:pos + 2 + _HEX[e]]
                    if len(digits) != _HEX[e] or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                        raise DumpedYamlError(i + 1, f"the escape \\{e}{digits} is not {_HEX[e]} hex digits")
                    out.append(chr(int(digits, 16)))
                    pos += 2 + _HEX[e]
                else:
                    raise DumpedYamlError(i + 1, f"the escape \\{e} is not YAML")
                kept = len(out)
                continue
            out.append(c)
            pos += 1


def loads(text: str) -> Any:
    """The document in `text`, as `yaml.safe_load` reads it (the subset above)."""
    r = _Reader(text)
    i = r.skip(0)
    if i < len(r.lines) and r.lines[i].startswith("%"):
        raise DumpedYamlError(i + 1, "a directive is not read")
    if i < len(r.lines) and (r.lines[i] == "---" or r.lines[i].startswith("--- ")):
        rest = r.lines[i][3:].strip()
        if rest:
            raise DumpedYamlError(i + 1, "a document that starts on the '---' line is not read")
        i = r.skip(i + 1)
    if i >= len(r.lines):
        return None
    if _indent(r.lines[i]):
        raise DumpedYamlError(i + 1, "the document's first line is indented")
    value, i = r.node(i, 0, -1)
    i = r.skip(i)
    if i < len(r.lines) and r.lines[i].rstrip() == "...":
        i = r.skip(i + 1)
    if i < len(r.lines):
        line = r.lines[i].strip()
        what = "a second document is not read" if line.startswith(("---", "...")) else \
            f"{line[:30]!r} is outside the document's structure"
        raise DumpedYamlError(i + 1, what)
    return value
