"""Fleet runs' replicas and routing: names, targets files, route specs, and the router's
choices (exact shares over every window, least outstanding with ties to the least sent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.loadgen.fleet.replicas import (
    RoutePolicy,
    Router,
    parse_replicas,
    parse_route,
    read_targets,
)


def test_replicas_are_named_by_host_port_or_given_names() -> None:
    reps = parse_replicas(["http://10.0.0.1:8000/", "b=http://10.0.0.2:8000", "http://10.0.0.1:8000/v2"])
    assert [(r.name, r.url) for r in reps] == [("10.0.0.1:8000", "http://10.0.0.1:8000"),
                                               ("b", "http://10.0.0.2:8000"),
                                               ("r3", "http://10.0.0.1:8000/v2")]


@pytest.mark.parametrize(("args", "message"), [
    (["a=http://x:1", "a=http://y:2"], "two replicas are called 'a'"),
    (["bad name=http://x:1", "http://y:2"], "replica name 'bad name'")])
def test_bad_replica_names(args: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_replicas(args)


def test_targets_file(tmp_path: Path) -> None:
    f = tmp_path / "fleet.txt"
    f.write_text("# the fleet\na=http://10.0.0.1:8000 dcgm=http://10.0.0.1:9400/metrics\n\n"
                 "http://10.0.0.2:8000  # no exporter\n")
    reps = read_targets(f)
    assert [(r.name, r.gpu_metrics_url) for r in reps] == [
        ("a", "http://10.0.0.1:9400/metrics"), ("10.0.0.2:8000", None)]
    f.write_text("a=http://x:1 exporter=http://x:9400\n")
    with pytest.raises(ValueError, match="line 1: 'exporter=http://x:9400' is not dcgm=URL"):
        read_targets(f)
    f.write_text("# nothing\n")
    with pytest.raises(ValueError, match="names no replica"):
        read_targets(f)


def test_route_specs() -> None:
    reps = parse_replicas(["a=http://x:1", "b=http://x:2", "c=http://x:3"])
    assert parse_route("share:a=2,c=1", reps).weights == (2.0, 0.0, 1.0)
    assert parse_route("share:3,1,1", reps).weights == (3.0, 1.0, 1.0)
    assert parse_route("least-outstanding", reps).kind == "least-outstanding"
    for spec, msg in (("random", "is not one of"), ("share:d=1", "no replica called 'd'"),
                      ("share:a=-1", ">= 0"), ("share:a=0", "at least one"), ("share:1,1,1,1", "4 weights"),
                      ("round-robin:2", "takes no parameters"), ("share:a=x", "not a number")):
        with pytest.raises(ValueError, match=msg):
            parse_route(spec, reps)


@pytest.mark.parametrize("weights", [(2.0, 1.0, 1.0), (5.0, 3.0, 0.0), (1.0, 1.0, 7.0)])
def test_share_routing_holds_its_proportions_in_every_cycle(weights: tuple[float, ...]) -> None:
    router = Router(RoutePolicy("share", weights), len(weights))
    total = int(sum(weights))
    picks = [router.pick() for _ in range(total * 20)]
    for start in range(0, len(picks), total):  # each cycle of sum(weights) picks: exact counts
        window = picks[start:start + total]
        assert [window.count(i) for i in range(len(weights))] == [int(w) for w in weights]
    # and never a long run of one replica when the shares are even-ish
    if weights == (2.0, 1.0, 1.0):
        assert picks[:4] == [0, 1, 2, 0]


def test_round_robin_and_least_outstanding() -> None:
    rr = Router(RoutePolicy("round-robin"), 3)
    assert [rr.pick() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    lo = Router(RoutePolicy("least-outstanding"), 3)
    first = [lo.pick() for _ in range(3)]
    assert first == [0, 0, 0]  # nothing sent yet: every pick is a tie, lowest index
    assert lo.started(0) == 1 and lo.started(0) == 2 and lo.started(1) == 1
    assert lo.pick() == 2  # nothing in flight there
    lo.started(2)
    lo.finished(0)
    lo.finished(0)
    assert lo.pick() == 0  # 0 in flight; 0 and ... 0 has the fewest in flight
    lo.check_invariants()
    lo.finished(1)
    lo.finished(2)
    assert lo.in_flight == [0, 0, 0] and lo.sent == [2, 1, 1]
    assert lo.pick() == 1  # all idle: the least sent, lowest index
