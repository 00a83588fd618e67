"""Profiler traces: import (Kineto JSON, Nsight Systems SQLite) and timeline analysis.

`import_trace(con, path, run=None)` loads a trace file or rank directory into the store's
trace tables (`docs/store.md`); `probes.traces.analysis` computes HTA's timeline breakdowns
from those tables in SQL and returns pandas DataFrames; `probes.traces.frame.TraceFrame`
computes HTA's breakdowns of a Kineto file in memory, without a store, with the same numbers.
"""

from probes.traces.errors import TraceError
from probes.traces.importer import ImportedTrace, delete_trace, import_trace

__all__ = ["ImportedTrace", "TraceError", "delete_trace", "import_trace"]
