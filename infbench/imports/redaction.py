"""Keeping credentials that a tool wrote into its result file out of the store.

Tools record their settings beside the results (AIPerf its whole input config with
`api_key` and extra headers, guidellm its backend arguments, a command line may carry
`--api-key` or `-H 'Authorization: ...'`). The store keeps what was run, never the key.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"

# A key whose name says it holds a credential (compared lower-case, `-` as `_`).
_SECRET_KEY = re.compile(r"(api_?key|authorization|auth|token|secret|password|passwd|bearer|cookie"
                         r"|credential)", re.IGNORECASE)
# Keys that look secret by name but hold counts or lengths of tokens, not credentials.
_NOT_SECRET = re.compile(r"(^tokens$|_tokens$|^tokens_|_tokens_|token_(count|len|length)s?$|tokenizer)",
                         re.IGNORECASE)
# Headers are a mapping or `Name: value` strings; any header may carry a credential.
_HEADER_KEYS = {"headers", "header", "extra_headers", "http_headers"}

_FLAG_WITH_VALUE = re.compile(
    r"(--?[\w-]*(?:api[-_]?key|token(?!s|izer)|secret|password|auth)[\w-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)",
    re.IGNORECASE)
_HEADER_ARG = re.compile(r"((?:-H|--header|--extra-headers?)(?:=|\s+))(\"[^\"]*\"|'[^']*'|\S+)",
                         re.IGNORECASE)
_BEARER = re.compile(r"(Bearer\s+)\S+", re.IGNORECASE)
# `"api_key": "..."` inside a JSON argument on a command line.
_QUOTED_KEY = re.compile(r"""(["']?[\w-]*(?:api[-_]?key|secret|password|authorization)[\w-]*["']?\s*[:=]\s*)"""
                         r"""("[^"]*"|'[^']*'|[^\s,}]+)""", re.IGNORECASE)


def _is_secret_key(key: str) -> bool:
    k = key.replace("-", "_")
    return bool(_SECRET_KEY.search(k)) and not _NOT_SECRET.search(k)


def redact(value: Any, key: str = "") -> Any:
    """A copy of a JSON-like value with every credential replaced by `<redacted>`."""
    if isinstance(value, dict):
        return {k: (REDACTED if (_is_secret_key(str(k)) and v not in (None, "", [], {}))
                    or (str(k).lower() in _HEADER_KEYS and v not in (None, "", [], {}))
                    else redact(v, str(k)))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if isinstance(value, str):
        return redact_command(value)
    return value


def redact_command(text: str) -> str:
    """A command line (or any text) with flag values that name a credential, header
    arguments and bearer tokens replaced."""
    text = _FLAG_WITH_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _QUOTED_KEY.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    text = _HEADER_ARG.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return _BEARER.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
