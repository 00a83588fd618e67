"""Kineto `ts` literals (their JSON text, as msgspec.Raw hands them over) to integer ns.

Kineto writes microseconds with up to three decimals (`ns / 1000 . ns % 1000`). Parsed as
a double, an epoch-microsecond ts (1.7e15) keeps only a quarter microsecond, so the store
import converts the text as a DECIMAL, exactly; this does the same for the in-memory path,
with the store's rules: a number in a string is that number, anything else is missing, and
digits past the third decimal round half away from zero (DuckDB's DECIMAL cast).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import numpy as np

_INT64 = 2 ** 63
_WIDTH = 24  # bytes a plain literal may have: 16 integer digits, a dot, 3 decimals, spare


def literal_ns(lit: bytes) -> int | None:
    """Integer ns of one literal, None when it is not a number (or past int64 ns)."""
    whole, _, frac = lit.partition(b".")
    digits = whole[1:] if whole[:1] == b"-" else whole
    if digits.isdigit() and len(frac) <= 3 and (frac.isdigit() or not frac):
        ns = int(digits) * 1000 + (int(frac.ljust(3, b"0")) if frac else 0)
        ns = -ns if whole[:1] == b"-" else ns
    else:
        text = lit.decode("utf-8", "replace")
        try:
            value = Decimal(json.loads(text) if text[:1] == '"' else text)
            ns = int((value * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        except (InvalidOperation, ValueError, TypeError):  # NaN and Infinity included
            return None
    return ns if -_INT64 <= ns < _INT64 else None


def literals_ns(vals: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(ns, is a number) of each literal (bytes, or msgspec.Raw: anything with the buffer
    protocol). The plain `digits[.ddd]` ones (all of Kineto's) are read as a matrix of bytes
    a column at a time, a fifth of a Python loop's time; the rest one by one. The matrix is
    gathered from the literals joined into one buffer: no bytes object per literal."""
    n = len(vals)
    lens = np.fromiter(map(len, vals), np.int64, n)
    buf = np.frombuffer(b"".join(vals) + bytes(_WIDTH), dtype=np.uint8)
    starts = np.cumsum(lens) - lens
    col = np.arange(_WIDTH)
    # 0-padded rows; a literal longer than the row is cut here and read one by one below
    m = np.where(col < lens[:, None], buf[starts[:, None] + col], np.uint8(0))
    digit = (m >= 48) & (m <= 57)
    dot = m == 46
    ndot = dot.sum(axis=1)
    nfrac = np.where(ndot == 1, lens - 1 - dot.argmax(axis=1), 0)
    # at most 16 integer digits: x1000 stays under 1e19, inside uint64
    plain = ((lens <= _WIDTH) & digit[:, 0] & (ndot <= 1) & (nfrac <= 3)
             & (digit | dot | (m == 0)).all(axis=1) & (digit.sum(axis=1) - nfrac <= 16))
    v = np.zeros(n, dtype=np.uint64)
    for j in range(_WIDTH):
        v = np.where(digit[:, j], v * np.uint64(10) + (m[:, j] - np.uint8(48)), v)
    v *= (10 ** np.clip(3 - nfrac, 0, 3)).astype(np.uint64)
    plain &= v < np.uint64(_INT64)
    ns = np.where(plain, v, 0).astype(np.int64)
    ok = plain.copy()
    for i in np.flatnonzero(~plain).tolist():
        x = literal_ns(bytes(vals[i]))
        if x is not None:
            ns[i], ok[i] = x, True
    return ns, ok
