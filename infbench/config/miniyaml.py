"""The YAML that engine option files use: nested block mappings, block and flow lists,
plain and quoted scalars, comments. Anchors, tags, multi-line strings and documents are
refused with the line that uses them, so a file is read exactly or not at all (infbench
takes no YAML dependency for what TensorRT-LLM's `--config` files need).
"""

from __future__ import annotations

import re
from typing import Any

from infbench.config.pyrepr import ReprError, parse_value


class YamlError(ValueError):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


_KEY = re.compile(r"^([A-Za-z0-9_.\-/]+|'[^']*'|\"[^\"]*\")\s*:(?:\s+|$)")
_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")
_UNSUPPORTED = ("&", "*", "!", "|", ">", "%")


def _strip_comment(text: str) -> str:
    quote = ""
    for i, c in enumerate(text):
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text.rstrip()


def scalar(text: str, line: int) -> Any:
    t = text.strip()
    if t == "" or t in ("~", "null", "Null", "NULL"):
        return None
    if t[0] in "[{":
        try:
            return parse_value(t)
        except ReprError as exc:
            what = "is never closed" if exc.truncated else "is malformed"
            raise YamlError(f"the flow collection {t[:30]!r} {what} ({exc})", line) from None
    if t[0] in "'\"":
        if len(t) < 2 or t[-1] != t[0]:
            raise YamlError(f"the quoted string {t[:30]!r} is never closed", line)
        return t[1:-1].replace("''", "'") if t[0] == "'" else parse_value(t)
    if t[0] in _UNSUPPORTED:
        raise YamlError(f"{t[:20]!r}: anchors, aliases, tags and block strings are not read", line)
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if _INT.match(t):
        return int(t)
    if _FLOAT.match(t):
        return float(t)
    return t


def loads(text: str) -> dict[str, Any]:
    rows: list[tuple[int, int, str]] = []  # (line, indent, content)
    for n, raw in enumerate(text.splitlines(), start=1):
        if raw.strip() in ("---", "..."):
            if rows:
                raise YamlError("a second YAML document is not read", n)
            continue
        body = _strip_comment(raw)
        if not body.strip():
            continue
        lead = body[:len(body) - len(body.lstrip())]
        if "\t" in lead:
            raise YamlError("a tab in the indentation (YAML indents with spaces)", n)
        rows.append((n, len(lead), body.strip()))
    if not rows:
        return {}
    value, end = _block(rows, 0, rows[0][1])
    if end != len(rows):
        n, _, content = rows[end]
        raise YamlError(f"{content[:30]!r} is indented less than its block but not as any parent", n)
    if not isinstance(value, dict):
        raise YamlError("the file is not a mapping of option names", rows[0][0])
    return value


def _block(rows: list[tuple[int, int, str]], i: int, indent: int) -> tuple[Any, int]:
    if rows[i][2].startswith("- ") or rows[i][2] == "-":
        return _list(rows, i, indent)
    out: dict[str, Any] = {}
    while i < len(rows):
        n, ind, content = rows[i]
        if ind < indent:
            break
        if ind > indent:
            raise YamlError(f"{content[:30]!r} is indented deeper than the keys around it", n)
        m = _KEY.match(content)
        if not m:
            raise YamlError(f"{content[:30]!r} is not `key: value`", n)
        key = m.group(1).strip("'\"")
        if key in out:
            raise YamlError(f"key {key!r} appears twice", n)
        rest = content[m.end():]
        i += 1
        if rest:
            out[key] = scalar(rest, n)
        elif i < len(rows) and (rows[i][1] > indent or
                                (rows[i][1] == indent and rows[i][2].startswith("-"))):
            out[key], i = _block(rows, i, rows[i][1])
        else:
            out[key] = None
    return out, i


def _list(rows: list[tuple[int, int, str]], i: int, indent: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while i < len(rows):
        n, ind, content = rows[i]
        if ind != indent or not (content.startswith("- ") or content == "-"):
            break
        item = content[1:].strip()
        i += 1
        if _KEY.match(item):  # `- key: value` opens a mapping inside the list
            sub = [(n, ind + 2, item)]
            while i < len(rows) and rows[i][1] > ind:
                sub.append(rows[i])
                i += 1
            value, _ = _block(sub, 0, ind + 2)
            out.append(value)
        else:
            out.append(scalar(item, n))
    return out, i
