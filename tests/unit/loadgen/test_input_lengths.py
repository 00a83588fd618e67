"""Input tokens asked against the server's count, from hand-made rows; and the fingerprint of
conversations whose recorded targets include each target's own template tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from infbench.loadgen.fingerprint import run_fingerprint
from infbench.loadgen.input_lengths import MEAN_WARN, input_length_check
from infbench.store import BatchWriter, create_run
from tests.support.stores import new_store


def _store(tmp: Path, rows: list[dict[str, Any]], config: dict[str, Any] | None = None,
           name: str = "s") -> duckdb.DuckDBPyConnection:
    con = new_store(tmp / f"{name}.duckdb")
    create_run(con, run_id="r", config=config or {"token_model": {"source": "measured"}}, target_url="u",
               model="m", endpoint="chat", t0_monotonic_ns=0)
    cols = ("request_idx", "label", "phase", "conversation_id", "turn", "intended_send_ns", "send_ns",
            "target_input_tokens", "prompt_tokens", "max_tokens", "error_class")
    defaults = {"label": "x", "phase": "measure", "conversation_id": None, "turn": None, "intended_send_ns": 0,
                "send_ns": 0, "max_tokens": 4, "error_class": None}
    full = [{**defaults, "request_idx": i, **r} for i, r in enumerate(rows)]
    w = BatchWriter(con, "r")
    w.put("requests", {c: [r.get(c) for r in full] for c in cols})
    w.close()
    return con


@pytest.mark.parametrize("targets", [[512] * 6, [64, 300, 1024, 2048], [17, 4000]])
def test_exact_prompts_are_on_target_without_a_warning(tmp_path: Path, targets: list[int]) -> None:
    rows = [{"target_input_tokens": t, "prompt_tokens": t} for t in targets]
    rows.append({"target_input_tokens": 100, "prompt_tokens": None, "error_class": "http_500"})
    figures, warning = input_length_check(_store(tmp_path, rows), "r")
    assert warning is None and figures is not None
    assert figures["requests"] == figures["exact"] == figures["within_1pct"] == len(targets)
    assert figures["mean_error_pct"] == 0 and figures["max_abs_error_tokens"] == 0


def test_prompts_short_of_the_target_warn_with_both_means(tmp_path: Path) -> None:
    # The audit's case: 512 asked, the server counted 422-500 (mean 476).
    counted = [422, 470, 480, 490, 495, 500]
    rows = [{"target_input_tokens": 512, "prompt_tokens": n} for n in counted]
    figures, warning = input_length_check(_store(tmp_path, rows), "r")
    assert figures is not None and figures["within_1pct"] == 0
    assert figures["mean_actual_tokens"] == pytest.approx(476.17, abs=0.01)
    assert warning is not None
    assert "476.2 tokens" in warning and "512.0 were asked" in warning and "-7.0%" in warning
    assert "probe requests' usage" in warning


@pytest.mark.parametrize(("error", "warns"), [(MEAN_WARN * 0.9, False), (MEAN_WARN * 1.1, True)])
def test_the_warning_threshold_is_on_the_mean(tmp_path: Path, error: float, warns: bool) -> None:
    rows = [{"target_input_tokens": 1000, "prompt_tokens": round(1000 * (1 + error))} for _ in range(3)]
    cfg = {"token_model": {"source": "tokenize"}}
    _, warning = input_length_check(_store(tmp_path, rows, cfg), "r")
    assert (warning is not None) == warns
    if warns:
        assert "/tokenize" in warning


def test_requests_without_targets_or_counts_give_no_figures(tmp_path: Path) -> None:
    rows = [{"target_input_tokens": None, "prompt_tokens": 80}, {"target_input_tokens": 80, "prompt_tokens": None}]
    assert input_length_check(_store(tmp_path, rows), "r") == (None, None)


def _conversation_rows(template: tuple[int, int]) -> list[dict[str, Any]]:
    first, per_turn = template
    content = {(0, 0): 100, (0, 1): 160, (1, 0): 90, (0, 2): 250, (1, 1): 170}
    return [{"conversation_id": c, "turn": t, "label": f"turn-{t}", "intended_send_ns": 10**6 * c if t == 0 else 7,
             "target_input_tokens": n + first + t * per_turn, "prompt_tokens": n + first + t * per_turn}
            for (c, t), n in content.items()]


def test_one_conversation_plan_has_one_fingerprint_whatever_the_template(tmp_path: Path) -> None:
    fps = []
    for i, template in enumerate([(99, 107), (9, 17), (0, 0)]):
        cfg = {"arrivals": {"kind": "poisson"}, "token_model": {"template": {"first": template[0],
                                                                              "per_turn": template[1]}}}
        fps.append(run_fingerprint(_store(tmp_path, _conversation_rows(template), cfg, name=f"t{i}"), "r"))
    assert len(set(fps)) == 1
    # A run stored before templates were recorded hashes its targets as they are.
    old = run_fingerprint(_store(tmp_path, _conversation_rows((0, 0)), {"arrivals": {"kind": "poisson"}},
                                 name="old"), "r")
    assert old == fps[0]
    other = run_fingerprint(_store(tmp_path, _conversation_rows((99, 107)), {"arrivals": {"kind": "poisson"}},
                                   name="other"), "r")
    assert other != fps[0]
