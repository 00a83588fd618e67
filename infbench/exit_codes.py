"""The exit codes every `infbench` command shares, and the boundary that keeps tracebacks out.

A CI job must tell a regression from a crash from a typo by the exit code alone, and a
person at 2 a.m. wants one line that names the file or value that was wrong, not a stack.
Commands report the errors they expect themselves; this boundary catches what escapes them:
a damaged store file, an output path that cannot be written, and bugs (`INFBENCH_TRACEBACK=1`
shows the stack for a bug report).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

OK = 0
FAIL = 1  # gate: a rule failed; run: requests failed or none completed
USAGE = 2  # bad input: an option, a file that is missing, unwritable or not what it should be
INTERNAL = 3  # a bug in infbench: the message says what escaped
INTERRUPTED = 130

SUMMARY = (f"Exit codes: {OK} success, {FAIL} gate fail or failed requests, {USAGE} bad input "
           f"(options, missing/unwritable/corrupt files), {INTERNAL} internal error, "
           f"{INTERRUPTED} interrupted.")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_duckdb_error(exc: BaseException) -> bool:
    duckdb = sys.modules.get("duckdb")  # never imported just to check: start-up stays fast
    return duckdb is not None and isinstance(exc, duckdb.Error)


def _say(message: str) -> None:
    # Plain stderr, never a markup renderer: the message may echo user input literally.
    sys.stderr.write(f"error: {message}\n")


@contextlib.contextmanager
def error_boundary() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        _say("interrupted")
        sys.exit(INTERRUPTED)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else ""
        what = exc.strerror or _first_line(exc)
        _say(f"{where}: {what}" if where else what)
        sys.exit(USAGE)
    except Exception as exc:
        if os.environ.get("INFBENCH_TRACEBACK"):
            raise
        if _is_duckdb_error(exc):
            _say(f"the store could not be read or written ({_first_line(exc)}); "
                 "the file may be damaged or written by another tool")
            sys.exit(USAGE)
        _say(f"internal error: {type(exc).__name__}: {_first_line(exc)} "
             "(set INFBENCH_TRACEBACK=1 for the traceback and report it)")
        sys.exit(INTERNAL)
