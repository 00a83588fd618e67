"""Profiler traces: import (Kineto JSON, Nsight Systems SQLite) and timeline analysis.

`import_trace(con, path, run=None)` loads a trace file or rank directory into the store's
trace tables (`docs/store.md`); `probes.traces.analysis` computes HTA's timeline breakdowns
from those tables in SQL and returns pandas DataFrames; `probes.traces.frame.TraceFrame`
computes HTA's breakdowns of a Kineto file in memory, without a store, with the same numbers.

The importer is loaded on first use: it brings DuckDB and the store, which analysing a file
in memory (`infbench trace analyze FILE`) does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from probes.traces.errors import TraceError

if TYPE_CHECKING:
    from probes.traces.importer import ImportedTrace, delete_trace, import_trace

__all__ = ["ImportedTrace", "TraceError", "delete_trace", "import_trace"]
_LAZY = ("ImportedTrace", "delete_trace", "import_trace")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from probes.traces import importer

        return getattr(importer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
