"""Paths of the real trace fixtures (tests/fixtures/traces, see its README) and a helper
that gives the Nsight export as a plain SQLite file (it is stored gzipped)."""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
SAMPLED = FIXTURES / "hta_sampled_rank-0_a100_128ranks.json.gz"
ALEXNET = FIXTURES / "hta_alexnet_a100.json.gz"
NCCL2 = FIXTURES / "hta_nccl_2ranks_a100.json.gz"
TWO_RANKS = FIXTURES / "sampled_2ranks"
NSYS_GZ = FIXTURES / "saxpy-mpi-cuda_nsys_a100.sqlite.gz"
# hta_expected.json's name for each trace
KINETO = {"sampled128": SAMPLED, "nccl2": NCCL2, "alexnet": ALEXNET, "filter2rank": TWO_RANKS}


def nsys_sqlite(dest: Path) -> Path:
    out = dest / "saxpy-mpi-cuda_nsys_a100.sqlite"
    if not out.exists():
        with gzip.open(NSYS_GZ, "rb") as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


def hta_expected(trace: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / "hta_expected.json").read_text())
    return data["holistictraceanalysis_0.5.0"]["traces"][trace]


def _close(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):  # type: ignore[arg-type]
            return math.isnan(a) and math.isnan(b)  # type: ignore[arg-type]
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))  # type: ignore[operator]
    return a == b


def same_as_store(frame: Any, con: Any, trace_id: str) -> None:
    """A TraceFrame's six analyses equal the imported trace's (Timeline), row for row."""
    from probes.traces.analysis import Timeline
    from probes.traces.frame import ANALYSES

    frame.timeline.check_invariants()
    with Timeline(con, trace_id) as tl:
        assert tl.events == frame.events
        for name in ANALYSES:
            cols, rows = frame.query(name)
            scols, srows, _ = tl.query(name)
            assert cols == scols, name
            if name == "kernel_types":  # SQL orders by time alone; ties are in any order
                srows = sorted(srows, key=lambda r: (-r[1], r[0]))
            assert len(rows) == len(srows), (name, rows, srows)
            for mine, theirs in zip(rows, srows, strict=True):
                assert all(_close(a, b) for a, b in zip(mine, theirs, strict=True)), (name, mine, theirs)
