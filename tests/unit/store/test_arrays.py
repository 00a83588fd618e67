"""infbench.store.arrays builds the same Arrow arrays as pyarrow.array, without importing pandas."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, date, datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infbench.store import arrays
from tests.support.cli import ROOT

TYPES = [pa.int64(), pa.int32(), pa.int16(), pa.int8(), pa.float64(), pa.bool_(), pa.string(),
         pa.timestamp("us"), pa.timestamp("ns"), pa.timestamp("ms"), pa.timestamp("us", tz="UTC")]
# Values of every kind the store's producers hand over, and some they should not (a float for
# an integer column, a bool for a double, NumPy scalars, ints past a type's range, aware
# datetimes and dates for a naive timestamp, stamps past a nanosecond column's range).
VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.integers(-200, 200),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.builds(np.int64, st.integers(-5, 5)), st.builds(np.float64, st.floats(-1, 1)),
    st.datetimes(), st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    st.datetimes(timezones=st.just(UTC)), st.dates(min_value=date(1900, 1, 1)))


def _ours(values, typ):  # noqa: ANN001, ANN202
    """arrays.array as a process without pandas runs it: once anything (pa.array itself, in
    this test process) has imported pandas, arrays.array hands every input to pa.array, which
    would compare pyarrow with itself."""
    try:
        return arrays._build(values, typ)
    except arrays._Unsupported:
        return pa.array(values, type=typ)


def _outcome(fn, values, typ):  # noqa: ANN001, ANN202
    try:
        return "ok", fn(values, typ)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        return "error", type(exc)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(TYPES), st.lists(VALUE, max_size=12))
def test_lists_give_pyarrows_array_or_pyarrows_error(typ: pa.DataType, values: list) -> None:
    ours, theirs = _outcome(_ours, values, typ), _outcome(pa.array, values, typ)
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "ok":
        assert ours[1].type == typ and ours[1].equals(theirs[1]), (ours[1], theirs[1])
        assert ours[1].null_count == theirs[1].null_count
        ours[1].validate(full=True)


@pytest.mark.parametrize("dtype, typ", [(np.int64, pa.int64()), (np.int32, pa.int32()),
                                        (np.float64, pa.float64()), (np.bool_, pa.bool_()),
                                        (np.int32, pa.int64()), (np.float32, pa.float64())])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000])
def test_numpy_columns_give_pyarrows_array(dtype, typ: pa.DataType, n: int) -> None:  # noqa: ANN001
    values = (np.random.default_rng(n).integers(-1000, 1000, n) % (2 if dtype is np.bool_ else 10 ** 6)
              ).astype(dtype)
    got = arrays.array(values, typ)
    got.validate(full=True)
    assert got.equals(pa.array(values, type=typ))
    sliced = values[::3]  # a strided view: its own buffer is not the column
    assert arrays.array(sliced, typ).equals(pa.array(sliced, type=typ))


def test_a_table_fills_missing_fields_with_nulls() -> None:
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    t = arrays.table({"a": [1, None], "b": ["x", "y"]}, schema)
    assert t.schema == schema and t.to_pylist() == [{"a": 1, "b": "x", "c": None},
                                                   {"a": None, "b": "y", "c": None}]


def test_the_store_writer_and_a_diagnosis_timestamp_never_import_pandas() -> None:
    code = ("import sys; from infbench.store.writer import to_arrow; "
            "t = to_arrow('requests', {'request_idx': [0, 1], 'label': ['a', None], "
            "'phase': ['measure', 'measure'], 'send_ns': [5, 6]}); "
            "assert t.num_rows == 2 and t.column('label').to_pylist() == ['a', None]; "
            "import datetime, pyarrow as pa; from infbench.store.arrays import table; "
            "d = datetime.datetime(2026, 12, 5, 4, 37, 1, 250); "
            "s = table({'at': [d, None]}, pa.schema([('at', pa.timestamp('us'))])); "
            "assert s.column('at').to_pylist() == [d, None]; "
            "print('pandas' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
