"""Probe settings are checked before any rank starts: sizes as nccl-tests' -b/-e/-f, ops, bounds."""

from __future__ import annotations

import pytest

from probes.links.errors import LinkProbeError
from probes.links.inject import SlowLink
from probes.links.plan import ProbeConfig, parse_ops, parse_size, parse_sizes


def test_sizes() -> None:
    assert parse_size("4096") == 4096 and parse_size("64K") == 65536 and parse_size("1.5MiB") == 1572864
    assert parse_sizes("4K:64K") == [4096, 8192, 16384, 32768, 65536]
    assert parse_sizes("4K:4M:4") == [4096, 16384, 65536, 262144, 1048576, 4194304]
    assert parse_sizes("1M, 64K,64K") == [65536, 1048576]


@pytest.mark.parametrize(("text", "says"), [("64Q", "not a size"), ("0", "between"), ("2G", "between"),
                                            ("4M:4K", "MIN <= MAX"), ("4K:4M:1", "FACTOR >= 2"),
                                            ("4K:4M:x", "whole number"), (",", "empty"), ("1:2:3:4", "MIN:MAX")])
def test_bad_sizes(text: str, says: str) -> None:
    with pytest.raises(LinkProbeError, match=says):
        parse_sizes(text)


def test_ops() -> None:
    assert parse_ops("all") == ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"]
    assert parse_ops("allreduce, all_to_all,allreduce") == ["all_reduce", "alltoall"]
    with pytest.raises(LinkProbeError, match="'sendrecv' is not one of"):
        parse_ops("sendrecv")  # measured by --pairwise, not in the sweep


@pytest.mark.parametrize(("kw", "says"), [({"ranks": 1}, "--ranks"), ({"ranks": 65}, "--ranks"),
                                          ({"dtype": "int8"}, "--dtype"), ({"iters": 0}, "--iters"),
                                          ({"threshold": 1.0}, "--slow-ratio"), ({"backend": "mpi"}, "--backend"),
                                          ({"inject": SlowLink(4, 2.0)}, "rank 4"), ({"timeout_s": 0}, "--timeout")])
def test_config_bounds(kw: dict, says: str) -> None:
    with pytest.raises(LinkProbeError, match=says):
        ProbeConfig(**kw).check()
