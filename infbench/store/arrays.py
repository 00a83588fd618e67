"""Arrow arrays from Python lists and NumPy columns without importing pandas.

`pyarrow.array` asks, for every input, whether it is a pandas object, and the first time it
asks it imports pandas: ~0.4 s of CPU and 60 MB, in every `infbench run` (the store writer's
first batch) although nothing here ever holds a pandas object. `array(values, type)` builds the
store's column types (integers, doubles, booleans, text, naive timestamps) from their buffers instead, and hands
anything else (another type, a value of an unexpected kind, an out-of-range integer) to
`pyarrow.array`, so results and errors are pyarrow's own. Once pandas is imported anyway,
`pyarrow.array` is used as is.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

_EXACT = 2 ** 53
_INTS = {pa.int64(): np.int64, pa.int32(): np.int32, pa.int16(): np.int16, pa.int8(): np.int8}


_NARROW = (np.int32, np.int16, np.int8)
_EPOCH = datetime(1970, 1, 1)
_PER_US = {"us": 1, "ns": 1000}  # exact from a datetime's microseconds; ms and s round: pyarrow's


class _Unsupported(Exception):
    """This input is left to pyarrow.array."""


def array(values: Any, type: pa.DataType) -> pa.Array:  # noqa: A002 - pyarrow's own name
    """`pyarrow.array(values, type=type)`, the same array, without pyarrow's pandas probe."""
    if "pandas" not in sys.modules:
        try:
            return _build(values, type)
        except _Unsupported:
            pass
    return pa.array(values, type=type)


def table(columns: dict[str, Any], schema: pa.Schema) -> pa.Table:
    """A table of `schema` from equal-length columns by name; a field not given is all NULL."""
    n = len(next(iter(columns.values()))) if columns else 0
    return pa.Table.from_arrays(
        [array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema],
        schema=schema)


def _build(values: Any, type: pa.DataType) -> pa.Array:  # noqa: A002
    if isinstance(values, np.ndarray):
        return _from_numpy(values, type)
    if not isinstance(values, list):
        raise _Unsupported
    n = len(values)
    valid = [v is not None for v in values]
    nulls = n - sum(valid)
    present = [v for v in values if v is not None] if nulls else values
    if type in _INTS:
        if any(v.__class__ is not int for v in present):
            raise _Unsupported  # bools, floats, NumPy scalars, text: pyarrow converts or refuses
        data = _filled(present, valid, nulls, _INTS[type])
    elif type == pa.float64():
        if any(v.__class__ is not float and (v.__class__ is not int or not -_EXACT <= v <= _EXACT)
               for v in present):
            raise _Unsupported  # (pyarrow refuses an int a double cannot hold exactly)
        data = _filled(present, valid, nulls, np.float64)
    elif type == pa.bool_():
        if any(v.__class__ is not bool for v in present):
            raise _Unsupported
        bits = _filled(present, valid, nulls, np.bool_)
        return pa.Array.from_buffers(type, n, [_validity(valid, nulls), _bits(bits)], nulls)
    elif pa.types.is_timestamp(type) and type.tz is None and type.unit in _PER_US:
        if any(v.__class__ is not datetime or v.tzinfo is not None for v in present):
            raise _Unsupported  # aware datetimes, dates, NumPy or pandas stamps: pyarrow converts
        scale = _PER_US[type.unit]
        data = _filled([_micros(v) * scale for v in present], valid, nulls, np.int64)
    elif type == pa.string():
        if any(v.__class__ is not str for v in present):
            raise _Unsupported
        try:
            encoded = [v.encode() for v in present]
        except UnicodeEncodeError:
            raise _Unsupported from None  # lone surrogates: pyarrow's error, not ours
        lengths = _filled([len(b) for b in encoded], valid, nulls, np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 2 ** 31:
            raise _Unsupported  # past a string array's 32-bit offsets: pyarrow chunks it
        return pa.Array.from_buffers(
            type, n, [_validity(valid, nulls), pa.py_buffer(offsets.astype(np.int32)),
                      pa.py_buffer(b"".join(encoded))], nulls)
    else:
        raise _Unsupported
    return pa.Array.from_buffers(type, n, [_validity(valid, nulls), pa.py_buffer(data)], nulls)


def _micros(v: datetime) -> int:
    """Microseconds since 1970-01-01 of a naive datetime, as pyarrow reads one (its wall clock)."""
    d = v - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _filled(present: list[Any], valid: list[bool], nulls: int, dtype: Any) -> np.ndarray:
    """The present values at their rows, zero at the NULLs'."""
    try:
        got = np.array(present, dtype=np.int64 if dtype in _NARROW else dtype)
    except OverflowError:
        raise _Unsupported from None  # past int64: pyarrow names the value
    if dtype in _NARROW and len(got):
        info = np.iinfo(dtype)
        if got.min() < info.min or got.max() > info.max:
            raise _Unsupported  # pyarrow names the value that does not fit
        got = got.astype(dtype)
    if not nulls:
        return got
    out = np.zeros(len(valid), dtype=dtype)
    out[np.array(valid, dtype=bool)] = got
    return out


def _validity(valid: list[bool], nulls: int) -> pa.Buffer | None:
    return _bits(np.array(valid, dtype=bool)) if nulls else None


def _bits(flags: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def _from_numpy(values: np.ndarray, type: pa.DataType) -> pa.Array:  # noqa: A002
    if values.ndim != 1:
        raise _Unsupported
    n = len(values)
    if type == pa.bool_() and values.dtype == np.bool_:
        return pa.Array.from_buffers(type, n, [None, _bits(values)], 0)
    want = _INTS.get(type) or (np.float64 if type == pa.float64() else None)
    if want is None or values.dtype != want:
        raise _Unsupported  # a cast: pyarrow's rules (and errors) decide
    return pa.Array.from_buffers(type, n, [None, pa.py_buffer(np.ascontiguousarray(values))], 0)
