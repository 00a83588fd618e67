"""`--inject slow-link:rank=R,factor=F[,peer=P]`: parsing and what it slows."""

from __future__ import annotations

import time

import pytest

from probes.links.errors import LinkProbeError
from probes.links.inject import SlowLink, parse_inject


def test_parses_the_engine_syntax() -> None:
    s = parse_inject("slow-link:rank=2,factor=3", 4)
    assert s == SlowLink(2, 3.0) and str(s) == "slow-link:rank=2,factor=3"
    assert parse_inject(" slow-link: rank=0 , factor=1.5 , peer=3", 4) == SlowLink(0, 1.5, 3)


@pytest.mark.parametrize(("spec", "says"), [
    ("slow-device:factor=2", "unknown"), ("slow-link:rank=4,factor=2", "rank 4"),
    ("slow-link:factor=2", "rank is required"), ("slow-link:rank=1", "factor is required"),
    ("slow-link:rank=1,factor=0.5", "factor"), ("slow-link:rank=x,factor=2", "must be int"),
    ("slow-link:rank=1,factor=2,peer=1", "peer 1"), ("slow-link:rank=1,speed=2", "unknown field"),
    ("slow-link:rank", "not field=value"),
])
def test_bad_specs_name_the_field(spec: str, says: str) -> None:
    with pytest.raises(LinkProbeError, match=says):
        parse_inject(spec, 4)


def test_only_the_ranks_own_ops_are_slowed() -> None:
    s = SlowLink(1, 3.0)
    assert s.applies(1, (0, 1)) and s.applies(1, (0, 1, 2, 3))
    assert not s.applies(0, (0, 1)) and not s.applies(1, (2, 3))
    p = SlowLink(1, 3.0, peer=3)
    assert p.applies(1, (1, 3)) and p.applies(1, (0, 1, 2, 3)) and not p.applies(1, (0, 1))


def test_delay_is_factor_minus_one_times_the_call() -> None:
    s = SlowLink(0, 4.0)
    t = time.perf_counter()
    s.delay(0, (0, 1), 0.02)
    assert 0.055 <= time.perf_counter() - t < 0.5
    t = time.perf_counter()
    s.delay(1, (0, 1), 0.02)
    assert time.perf_counter() - t < 0.01
