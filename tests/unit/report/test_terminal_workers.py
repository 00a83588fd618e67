"""The terminal summary of a multi-worker run: one line with each worker's share and the loss."""

from __future__ import annotations

from rich.console import Console

from infbench.report.terminal import _print_workers


def _line(workers: dict) -> str:
    console = Console(record=True, width=200)
    _print_workers(console, workers)
    return console.export_text()


def test_a_lost_worker_and_the_clock_are_in_the_line() -> None:
    text = _line({"count": 2, "backend": "ray", "lost_requests": 7, "max_clock_uncertainty_ms": 0.41,
                  "per_worker": [{"worker": 0, "status": "completed", "stored_requests": 24, "planned_requests": 24},
                                 {"worker": 1, "status": "died", "stored_requests": 17, "planned_requests": 24}]})
    assert "Workers: 2 (ray), 7 requests lost, cross-node times ±0.82 ms" in text
    assert "0 completed 24/24, 1 died 17/24" in text


def test_one_host_says_its_clock_is_shared_and_an_open_plan_has_no_total() -> None:
    text = _line({"count": 1, "backend": "process", "lost_requests": 0, "max_clock_uncertainty_ms": 0.0,
                  "per_worker": [{"worker": 0, "status": "completed", "stored_requests": 5,
                                  "planned_requests": None, "node": "[bold]x[/]"}]})
    assert "one shared clock" in text and "0 completed 5" in text and "5/" not in text
