"""The HTML report's replica table for a fleet run (summary.fleet), escaped, fleet row last;
nothing for a one-target run."""

from __future__ import annotations

from infbench.report.html import fleet_table


def test_fleet_table() -> None:
    fleet = {"route": {"kind": "share", "shares": {"a<b": 0.67, "c": 0.33}},
             "replicas": [{"name": "a<b", "requests_sent": 10, "share": 0.667, "failed": 1,
                           "mean_concurrency": 2.5, "median_ttft_ms": 12.5, "p99_ttft_ms": 40.0,
                           "median_tpot_ms": 3.0, "p99_tpot_ms": 4.0, "p99_e2el_ms": 300.0},
                          {"name": "c", "requests_sent": 5, "share": 0.333, "failed": 0}],
             "fleet": {"requests_sent": 15, "failed": 1, "mean_concurrency": 2.0}}
    page = fleet_table(fleet)
    assert "route: share" in page and "a&lt;b" in page and "a<b" not in page
    rows = page.split("<tr>")[2:]
    assert [r.split("</td>")[0] for r in rows] == ["<td>a&lt;b", "<td>c", "<td>fleet"]
    assert "<td>67%</td><td>1</td><td>2.50</td><td>12.50</td><td>40.00</td>" in rows[0]
    assert "<td>100%</td>" in rows[2] and "<td>-</td>" in rows[1]  # what c did not report
    assert fleet_table(None) == "" and fleet_table({}) == ""
