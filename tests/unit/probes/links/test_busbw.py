"""nccl-tests' size, algbw and busbw definitions (doc/PERFORMANCE.md)."""

from __future__ import annotations

import pytest

from probes.links.busbw import (
    algbw_gbps,
    bus_factor,
    busbw_gbps,
    canonical_op,
    message_elements,
    ranks_from_ratio,
)


@pytest.mark.parametrize(("op", "n", "factor"), [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875), ("alltoall", 4, 0.75),
    ("broadcast", 8, 1.0), ("sendrecv", 2, 1.0), ("reduce", 4, 1.0),
])
def test_bus_factor(op: str, n: int, factor: float) -> None:
    assert bus_factor(op, n) == pytest.approx(factor)


def test_algbw_is_size_over_time_in_gb_per_s() -> None:
    # nccl-tests/issues/78: 268435456 B in 122131 us -> 2.20 GB/s, busbw 4.33 on 64 ranks
    assert algbw_gbps(268435456, 122131) == pytest.approx(2.198, abs=1e-3)
    assert busbw_gbps("all_reduce", 64, 268435456, 122131) == pytest.approx(4.33, abs=0.01)


def test_split_ops_round_the_count_to_a_multiple_of_the_ranks() -> None:
    assert message_elements("all_gather", 1000, 3, 4) == 249  # 250 -> 249 = 3 x 83
    assert message_elements("all_reduce", 1000, 3, 4) == 250
    assert message_elements("alltoall", 8, 4, 4) == 0  # too small to split: skipped


def test_ranks_from_the_printed_ratio() -> None:
    assert ranks_from_ratio("all_reduce", 17.08, 32.02) == 16   # aws-ofi-nccl#65
    assert ranks_from_ratio("all_gather", 154.20, 77.10) == 2   # nccl#1435
    assert ranks_from_ratio("broadcast", 10.0, 10.0) is None    # factor 1 says nothing
    assert ranks_from_ratio("all_reduce", 0.01, 0.01) is None   # too small to read


def test_op_spellings() -> None:
    assert canonical_op("all_reduce_perf") == "all_reduce"
    assert canonical_op("AllGather") == "all_gather"
    assert canonical_op("all_to_all") == "alltoall"
    assert canonical_op("allsum") is None
