"""The run request's groups check their own values before anything starts, keep the API key
out of every repr, and a sweep point differs from its sweep only in arrivals and tags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.workers.scale import Scale
from infbench.pipeline.request import (
    DEFAULT_DURATION_S,
    LoadSpec,
    RunRequest,
    TargetSpec,
    TelemetrySpec,
    WorkloadSpec,
    arrivals_from_options,
    default_duration,
)
from infbench.pipeline.sweep import SweepRequest, engine_settings
from infbench.sweep.loop import SweepPlan
from infbench.sweep.points import Point

SECRET = "sk-unit-4711"


def _target(urls: list[str], *, endpoint: str = "completions", route: str | None = None,
            metrics_url: str | None = None) -> TargetSpec:
    return TargetSpec.from_options(urls, route=route, api_key=SECRET, model=None, endpoint=endpoint,
                                   metrics_url=metrics_url, engine_args=[])


def _telemetry(**kw: Any) -> TelemetrySpec:
    args: dict[str, Any] = {
        "scrape_interval": 1.0, "gpu_probe": False, "gpu_interval": 1.0, "watch": True,
        "watch_stall": 1.0, "watch_captures": 3, "engine_pid": [], "prometheus": None,
        "prometheus_selector": None, "prometheus_token_env": None, "prometheus_token_file": None,
        "prometheus_ca_file": None, "prometheus_insecure": False, "prometheus_timeout": 10.0}
    args.update(kw)
    return TelemetrySpec.from_options(**args)


def test_one_url_no_url_and_a_fleet() -> None:
    one = _target(["http://h:1"])
    assert (one.url, one.first_url, one.bundled, one.replicas) == ("http://h:1", "http://h:1", False, [])
    assert _target([]).bundled and _target([]).first_url is None
    fleet = _target(["a=http://h:1", "b=http://h:2"], route="least-outstanding")
    assert fleet.url is None and not fleet.bundled and fleet.first_url == "http://h:1"
    assert [r.name for r in fleet.replicas] == ["a", "b"]


@pytest.mark.parametrize(("urls", "kw", "words"), [
    (["http://h:1"], {"endpoint": "embeddings"}, "endpoint"),
    (["http://h:1"], {"route": "round-robin"}, "route: routing needs a fleet"),
    (["http://h:1", "http://h:2"], {"metrics_url": "http://m"}, "metrics-url"),
])
def test_target_options_are_refused_in_one_line(urls: list[str], kw: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        _target(urls, **kw)


def test_the_key_is_in_no_repr(tmp_path: Path) -> None:
    req = RunRequest(tmp_path / "s.duckdb", _target(["http://h:1"]), WorkloadSpec.parse("synthetic", "64", "8"),
                     Arrivals("closed", concurrency=2), LoadSpec(5.0), _telemetry())
    assert req.target.api_key == SECRET
    assert SECRET not in repr(req) and SECRET not in str(req)


def test_workload_lengths_and_watch_values_name_their_option() -> None:
    with pytest.raises(ValueError, match="input_tokens"):
        WorkloadSpec.parse("synthetic", "uniform:100:10", None)
    with pytest.raises(ValueError, match="output_tokens"):
        WorkloadSpec.parse("synthetic", "64", "banana")
    for kw, words in (({"watch_stall": 0.0}, "watch-stall"), ({"watch_captures": -1}, "watch-captures"),
                      ({"engine_pid": [0]}, "engine-pid"), ({"gpu_interval": 0.0}, "gpu-interval")):
        with pytest.raises(ValueError, match=words):
            _telemetry(**kw)
        with pytest.raises(ValueError, match=words):  # a typo is one with --no-watch too
            _telemetry(watch=False, **kw)
    assert _telemetry(watch=False).watch is None
    with pytest.raises(ValueError):
        LoadSpec(5.0, seed=-1)


def test_arrivals_and_the_default_stop() -> None:
    closed = arrivals_from_options("closed", "synthetic", rate=4.0, burstiness=1.0, concurrency=None,
                                   time_scale=1.0)
    assert (closed.kind, closed.concurrency) == ("closed", 8)
    assert arrivals_from_options(None, "trace", rate=4.0, burstiness=1.0, concurrency=None,
                                 time_scale=1.0).kind == "trace"
    with pytest.raises(ValueError, match="arrival: trace"):
        arrivals_from_options("trace", "synthetic", rate=4.0, burstiness=1.0, concurrency=None,
                              time_scale=1.0)
    assert default_duration(None, None, closed) == DEFAULT_DURATION_S
    assert default_duration(None, 10, closed) is None
    assert default_duration(None, None, Arrivals("trace")) is None


def test_the_run_request_refuses_what_cannot_be_combined(tmp_path: Path) -> None:
    wl, load = WorkloadSpec.parse("synthetic", "64", "8"), LoadSpec(5.0)
    with pytest.raises(ValueError, match="workers"):
        RunRequest(tmp_path / "s.duckdb", _target(["http://h:1", "http://h:2"]), wl,
                   Arrivals("closed", concurrency=2), load, _telemetry(), Scale(workers=2))
    with pytest.raises(ValueError, match="is a directory"):
        RunRequest(tmp_path, _target(["http://h:1"]), wl, Arrivals("closed", concurrency=2), load,
                   _telemetry())


def test_a_sweep_point_is_its_sweep_at_one_load(tmp_path: Path) -> None:
    sweep = SweepRequest(tmp_path / "s.duckdb", _target(["http://h:1"]), WorkloadSpec.parse("prefix", "64", "8"),
                         LoadSpec(2.0, slo_ms={"ttft": 500.0}), _telemetry(),
                         SweepPlan("auto", max_concurrency=16))
    closed = sweep.at("sweep-x", 0, Point("concurrency", 4))
    rate = sweep.at("sweep-x", 5, Point("rate", 2.5))
    assert (closed.arrivals.kind, closed.arrivals.concurrency) == ("closed", 4)
    assert (rate.arrivals.kind, rate.arrivals.rate, rate.arrivals.concurrency) == ("poisson", 2.5, 16)
    assert rate.tags == {"sweep": {"sweep_id": "sweep-x", "point_idx": 5, "kind": "rate", "value": 2.5}}
    assert (closed.target, closed.workload, closed.load, closed.telemetry) == (
        sweep.target, sweep.workload, sweep.load, sweep.telemetry)
    with pytest.raises(ValueError, match="duration"):
        SweepRequest(tmp_path / "s.duckdb", sweep.target, sweep.workload, LoadSpec(0.0), sweep.telemetry,
                     sweep.plan)


def test_engine_settings_are_the_resolved_values() -> None:
    doc = {"model": {"value": "m", "default": True}, "gpu": {"value": "H100", "default": False}, "n": 3}
    assert engine_settings(doc) == {"model": "m", "gpu": "H100", "n": 3}
    assert engine_settings(None) is None


def test_schemas_make_a_mix_and_their_companions_need_them() -> None:
    spec = WorkloadSpec.parse("structured", "64", "8", schemas=5, schema_fields="uniform:3:9",
                              new_schemas=0.4)
    assert spec.schemas is not None and spec.schemas.count == 5 and spec.schemas.num_new == 2
    assert str(spec.schemas.fields) == "uniform:3:9"
    assert WorkloadSpec.parse("structured", "64", "8").schemas is None
    with pytest.raises(ValueError, match="go with --schemas K"):
        WorkloadSpec.parse("structured", "64", "8", new_schemas=0.5)
    with pytest.raises(ValueError, match="schema_fields"):
        WorkloadSpec.parse("structured", "64", "8", schemas=3, schema_fields="banana")
