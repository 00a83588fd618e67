"""Run status and exit code from what the requests did."""

from __future__ import annotations

import pytest

from infbench.loadgen.run.outcome import (
    EXIT_ERRORS,
    EXIT_OK,
    EXIT_SIGNAL,
    classify,
    exit_code,
    validate_max_error_rate,
)


def test_clean_run_is_completed_and_exits_0() -> None:
    o = classify("completed", None, {}, 40)
    assert (o.status, o.reason, o.error_rate) == ("completed", None, 0.0)
    assert exit_code(o, 40, max_error_rate=0.0, signalled=False) == EXIT_OK


def test_hung_engine_run_names_each_class_and_exits_1() -> None:
    o = classify("completed", None, {"timeout": 21}, 23)
    assert o.status == "completed_with_errors"
    assert o.reason == "21 of 23 requests failed (21 timeout)"
    assert exit_code(o, 2, max_error_rate=0.0, signalled=False) == EXIT_ERRORS


def test_classes_are_listed_most_frequent_first() -> None:
    o = classify("completed", None, {"http_500": 3, "timeout": 5, "malformed_sse": 3}, 30)
    assert o.reason == "11 of 30 requests failed (5 timeout, 3 http_500, 3 malformed_sse)"


@pytest.mark.parametrize(("failed", "sent", "max_rate", "code"), [
    (8, 15, 0.5, EXIT_ERRORS), (8, 15, 0.6, EXIT_OK), (1, 1000, 0.0, EXIT_ERRORS),
    (1, 1000, 0.001, EXIT_OK), (3, 7, 3 / 7, EXIT_OK)])
def test_max_error_rate_is_a_ceiling_on_the_failed_share(failed: int, sent: int, max_rate: float,
                                                         code: int) -> None:
    o = classify("completed", None, {"http_500": failed}, sent)
    assert o.status == "completed_with_errors"
    assert exit_code(o, sent - failed, max_error_rate=max_rate, signalled=False) == code


def test_nothing_completed_fails_even_when_errors_are_accepted() -> None:
    o = classify("completed", None, {"connection_refused": 5}, 5)
    assert exit_code(o, 0, max_error_rate=1.0, signalled=False) == EXIT_ERRORS


def test_interrupted_run_keeps_its_status_and_reason() -> None:
    o = classify("interrupted", "4 requests still in flight 35s after sending stopped",
                 {"cancelled": 4, "timeout": 2}, 20)
    assert o.status == "interrupted" and o.reason.startswith("4 requests still in flight")
    assert exit_code(o, 14, max_error_rate=1.0, signalled=False) == EXIT_ERRORS
    assert exit_code(o, 14, max_error_rate=1.0, signalled=True) == EXIT_SIGNAL


@pytest.mark.parametrize("bad", [-0.1, 1.01, float("nan")])
def test_max_error_rate_outside_0_1_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="max_error_rate"):
        validate_max_error_rate(bad)
