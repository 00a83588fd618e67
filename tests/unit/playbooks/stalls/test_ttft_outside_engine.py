"""The TTFT split between the engine (vLLM's own histograms) and the rest: a warning only
when the client kept up; a client that ran late itself (seen on a loaded 2-core host beside a
real vLLM: event-loop lag p50 318 ms, client TTFT 133 ms against the engine's 46 ms) cannot
tell network, proxy and front end from its own delay, and says so at `info`."""

from __future__ import annotations

import pytest

from playbooks.stalls.findings import ttft_finding
from playbooks.stalls.server_view import TtftSplit


def split(client: float, engine: float, lag: float | None, bound: bool | None) -> TtftSplit:
    return TtftSplit({"client_ttft_ms": client, "engine_ttft_ms": engine, "engine_queue_ms": 0.0,
                      "client_loop_lag_p50_ms": lag, "client_bound": bound,
                      "outside_engine_ms": client - engine}, "SELECT 1")


@pytest.mark.parametrize("client,engine,lag", [(140.0, 45.0, 1.5), (420.0, 120.0, 9.0),
                                                (95.0, 30.0, None)])
def test_a_client_that_kept_up_warns(client: float, engine: float, lag: float | None) -> None:
    f = ttft_finding(split(client, engine, lag, False))
    assert f is not None and f.severity == "warning"
    assert f"{client - engine:.0f} ms" in f.summary


@pytest.mark.parametrize("client,engine,lag,bound", [(133.0, 46.0, 318.0, True),
                                                     (133.0, 46.0, 318.0, False),
                                                     (260.0, 60.0, 120.0, None),
                                                     (300.0, 100.0, 4.0, True)])
def test_a_late_client_cannot_tell_and_says_so(client: float, engine: float, lag: float,
                                               bound: bool | None) -> None:
    f = ttft_finding(split(client, engine, lag, bound))
    assert f is not None and f.severity == "info"
    assert "cannot" in f.summary and f"{client - engine:.0f} ms" in f.summary


@pytest.mark.parametrize("client,engine", [(80.0, 45.0), (130.0, 90.0)])
def test_a_small_gap_is_no_finding(client: float, engine: float) -> None:
    assert ttft_finding(split(client, engine, 0.5, False)) is None
