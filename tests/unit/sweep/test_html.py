"""The sweep page marks the knee and the goodput maximum where the analysis found them, and
says "no knee: not saturated" (with the reason) where it found none."""

from __future__ import annotations

import json
import re
from typing import Any

from infbench.sweep.html import sweep_html


def _point(idx: int, kind: str, value: float, thr: float, goodput: float | None) -> dict[str, Any]:
    return {"idx": idx, "run_id": f"r{idx}", "kind": kind, "value": value, "request_throughput": thr / 24,
            "output_throughput": thr, "p50_ttft_ms": 10.0 + idx, "p99_ttft_ms": 20.0 + idx, "p50_tpot_ms": 6.0,
            "p99_e2el_ms": 200.0 + 40 * idx, "p50_itl_ms": 6.0, "p50_e2el_ms": 150.0 + 30 * idx,
            "mean_batch": min(value, 4.0), "goodput": goodput, "failed": 0}


POINTS = [_point(0, "concurrency", 1, 150, 6.0), _point(1, "concurrency", 2, 290, 12.0),
          _point(2, "concurrency", 4, 550, 22.0), _point(3, "concurrency", 8, 560, 19.0),
          _point(4, "rate", 12.0, 234, 9.7)]


def _specs(page: str) -> dict[str, dict[str, Any]]:
    data = re.search(r"<script type='application/json' id='chart-data'>(.*?)</script>", page, re.S).group(1)
    return {c["title"]: c for c in json.loads(data)}


def _notes(page: str) -> list[str]:
    return re.findall(r"<p class='note'>(.*?)</p>", page)


def test_knee_and_goodput_max_are_marked_on_the_curves() -> None:
    result = {"points": POINTS, "knee": POINTS[1], "goodput_max": POINTS[2],
              "saturation": {"reached": True, "reason": "throughput stopped rising", "at_idx": 3}}
    page = sweep_html("sw", result)
    specs = _specs(page)
    e2e = specs["End-to-end latency against throughput"]
    assert [(m["x"], m["label"]) for m in e2e["marks"]] == [(290.0, "knee (c=2)"), (550.0, "goodput max (c=4)")]
    assert e2e["x"]["unit"] == "tokens/s" and [a["unit"] for a in e2e["y"]] == ["ms"]
    load = specs["Throughput and goodput against concurrency (closed loop)"]
    assert load["x"]["log"] and [m["x"] for m in load["marks"]] == [2.0, 4.0]
    assert [a["unit"] for a in load["y"]] == ["tokens/s", "requests/s"]
    assert {s["name"]: s["axis"] for s in load["series"]} == {
        "output throughput": 0, "requests completed": 1, "goodput (met the SLO)": 1}
    # A mark belongs to its load kind: neither is a rate point.
    assert specs["Throughput and goodput against offered rate (open loop)"]["marks"] == []
    assert "knee of the curve: point 1" in page and "goodput maximum: point 2" in page
    assert not any("No knee" in n for n in _notes(page))


def test_no_knee_says_not_saturated_and_why() -> None:
    reason = "not saturated: throughput still rose 1.9x from load 1 to 2 (elasticity 0.92); raise the load"
    result = {"points": POINTS[:2], "knee": None, "goodput_max": POINTS[1],
              "saturation": {"reached": False, "reason": reason, "at_idx": None}}
    page = sweep_html("sw", result)
    notes = _notes(page)
    assert "No knee: not saturated. Throughput still rose 1.9x from load 1 to 2 (elasticity 0.92); " \
           "raise the load" in notes
    assert notes.count("No knee: not saturated.") == 3  # the other curves, without the reason again
    e2e = _specs(page)["End-to-end latency against throughput"]
    assert [m["label"] for m in e2e["marks"]] == ["goodput max (c=2)"]
    assert "no knee: not saturated" in page


def test_step_time_axis_is_not_forced_to_zero_and_a_sweep_without_batches_says_so() -> None:
    points = [{**p, "mean_batch": None} for p in POINTS]
    result = {"points": points, "knee": None, "goodput_max": None, "saturation": {},
              "step_line": {"intercept_ms": 6.1, "slope_ms": 0.03, "source": "engine_steps",
                            "batches": [1.0, 2.0, 4.0]}, "roofline": None}
    page = sweep_html("sw", result)
    step = _specs(page)["Decode step time against batch"]
    assert step["y"][0]["zero"] is False and step["data"][1][0] == 6.13
    assert "no point has a decode batch" in page
