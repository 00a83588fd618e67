"""What a finished run amounts to: the status stored with it and the exit code of `infbench run`.

A run whose requests failed is not a healthy run, whatever the summary's percentiles say: a
hung engine leaves 2 completed and 21 timed-out requests, and a CI job must not read that as
success. The status names it (`completed_with_errors`, with the count per error class in the
reason) and the exit code makes it impossible to miss; `--max-error-rate` is for users who
accept some failures (a fault-injection run, an overloaded endpoint measured on purpose).
"""

from __future__ import annotations

from dataclasses import dataclass

# Exit codes of `infbench run` (documented in its --help, the README and docs/guides/load-testing.md).
EXIT_OK = 0
EXIT_ERRORS = 1  # requests failed beyond --max-error-rate, none completed, or the run was cut short
EXIT_USAGE = 2  # bad input: nothing was sent
EXIT_SIGNAL = 130  # interrupted by SIGINT/SIGTERM; what was received is stored

EXIT_CODES_HELP = (
    f"Exit codes: {EXIT_OK} clean run; {EXIT_ERRORS} requests failed (beyond --max-error-rate), "
    f"none completed, or the run was cut short; {EXIT_USAGE} bad input; "
    f"{EXIT_SIGNAL} interrupted by a signal."
)


@dataclass(frozen=True)
class Outcome:
    status: str  # completed | completed_with_errors | interrupted
    reason: str | None
    failed: int
    sent: int

    @property
    def error_rate(self) -> float:
        return self.failed / self.sent if self.sent else 0.0


def classify(status: str, reason: str | None, errors: dict[str, int], sent: int) -> Outcome:
    """The stored status of a run the runner ended with `status` (completed | interrupted).

    `errors` counts requests per error class over every phase: a request that failed during
    warm-up failed all the same. An interrupted run stays interrupted (its in-flight requests
    are `cancelled` by the interruption, not by the target).
    """
    failed = sum(errors.values())
    if status != "completed" or failed == 0:
        return Outcome(status, reason, failed, sent)
    by_class = ", ".join(f"{n} {k}" for k, n in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0])))
    text = f"{failed} of {sent} requests failed ({by_class})"
    return Outcome("completed_with_errors", f"{reason}; {text}" if reason else text, failed, sent)


def exit_code(outcome: Outcome, completed: int, *, max_error_rate: float, signalled: bool) -> int:
    if signalled:
        return EXIT_SIGNAL
    if outcome.status == "interrupted" or completed == 0:
        return EXIT_ERRORS
    if outcome.status == "completed_with_errors" and outcome.error_rate > max_error_rate:
        return EXIT_ERRORS
    return EXIT_OK


def validate_max_error_rate(value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"max_error_rate: must be a fraction between 0 and 1, got {value!r}")
