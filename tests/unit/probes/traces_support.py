"""Paths of the real trace fixtures (tests/fixtures/traces, see its README) and a helper
that gives the Nsight export as a plain SQLite file (it is stored gzipped)."""

from __future__ import annotations

import gzip
import json
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
