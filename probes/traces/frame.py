"""`TraceFrame`: a Kineto trace file (or rank directory) analysed in memory, without a store.

    from probes.traces.frame import TraceFrame
    tf = TraceFrame.read("trace.json.gz")     # or a directory with one file per rank
    tf.temporal_breakdown()                   # pandas DataFrames, the same as Timeline's
    tf.idle_time_breakdown(); tf.kernel_type_breakdown(); tf.comm_comp_overlap() ...

For a quick look at a trace someone captured, the way HTA's `TraceAnalysis` is used in a
notebook: nothing is written anywhere. `infbench trace import` + `Timeline` is the path that
keeps the trace, links it to a run and shows the SQL behind each number; both compute the
same analyses with the same (HTA's) definitions, which the tests check on every fixture.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np

from probes.traces import timeline_numpy as tn
from probes.traces.categories import CPU_OP_CATEGORIES
from probes.traces.errors import TraceError
from probes.traces.kineto_columns import RankEvents, read_rank
from probes.traces.paths import rank_files
from probes.traces.timeline_arrays import TimelineArrays, select

ANALYSES = tuple(tn.ANALYSES)


class TraceFrame:
    """The analysed GPU events of one trace, in memory. Owns its arrays."""

    def __init__(self, path: str, ranks: list[RankEvents], timeline: TimelineArrays) -> None:
        self.path = path
        self.ranks = sorted(r.rank for r in ranks)
        self.metadata = {r.rank: r.metadata for r in ranks}
        self.timeline = timeline

    @classmethod
    def read(cls, path: str | Path) -> TraceFrame:
        """Read a Kineto trace file or a directory of rank files. TraceError (one line
        naming the file) when it cannot be read; Nsight exports need `infbench trace import`."""
        path = Path(path)
        source, files = rank_files(path)
        if source != "kineto":
            raise TraceError(f"{path}: an Nsight Systems export; import it with "
                             "`infbench trace import` and analyse it from the store")
        # Parsing makes a Python object per event and frees them all at the end: collection
        # passes over that young heap would find nothing to free and double the parse time.
        enabled = gc.isenabled()
        gc.disable()
        try:
            ranks = []
            for f, hint in files:
                try:
                    ranks.append(read_rank(f, hint))  # as the import: the name's rank in a directory
                except TraceError as exc:
                    raise TraceError(f"{f}: {exc}") from None
        finally:
            if enabled:
                gc.enable()
        seen: set[int] = set()
        for r in ranks:
            if r.rank in seen:
                raise TraceError(f"{path}: two files claim rank {r.rank}")
            seen.add(r.rank)
        tl = select(ranks)
        if not len(tl):
            if not any(np.isin(r.cat, CPU_OP_CATEGORIES).any() for r in ranks):
                # Nothing cpu_steps could read either (the store's Timeline says the same).
                raise TraceError(f"{path}: no GPU events or CPU ops to analyse")
            raise TraceError(f"{path}: no GPU events to analyse (a CPU-only profile: import it "
                             "and use `infbench trace analyze --only cpu_steps`)")
        return cls(str(path), ranks, tl)

    @property
    def events(self) -> int:
        """GPU events analysed (after HTA's cut of the last profiler step)."""
        return len(self.timeline)

    def query(self, name: str, **kw: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
        """(columns, rows) of one analysis by name (see ANALYSES), without pandas."""
        if name not in tn.ANALYSES:
            raise TraceError(f"unknown analysis {name!r} (in memory: {', '.join(ANALYSES)})")
        return tn.ANALYSES[name](self.timeline, **kw)

    def _df(self, result: tuple[list[str], list[tuple[Any, ...]]]) -> Any:
        import pandas as pd

        cols, rows = result
        return pd.DataFrame.from_records(rows, columns=cols)

    def temporal_breakdown(self) -> Any:
        """Per rank: kernel time, idle, compute and the rest, in us and percent."""
        return self._df(tn.temporal(self.timeline))

    def idle_time_breakdown(self, consecutive_kernel_delay_us: float = 30) -> Any:
        """Per rank and stream: idle time before kernels by cause and its share."""
        return self._df(tn.idle(self.timeline, consecutive_kernel_delay_us))

    def idle_interval_stats(self, consecutive_kernel_delay_us: float = 30) -> Any:
        return self._df(tn.idle_stats(self.timeline, consecutive_kernel_delay_us))

    def kernel_type_breakdown(self, all_ranks: bool = True) -> Any:
        """Time under each kernel type and overlap of types; over all ranks, or per rank."""
        return self._df(tn.kernel_types(self.timeline) if all_ranks
                        else tn.kernel_types_per_rank(self.timeline))

    def kernel_breakdown(self, num_kernels: int = 10, duration_ratio: float = 0.8,
                         include_memory: bool = True) -> Any:
        """Per rank, kernel type and name: calls and durations, the tail folded into "others"."""
        return self._df(tn.kernels(self.timeline, num_kernels, duration_ratio, include_memory))

    def comm_comp_overlap(self) -> Any:
        """Per rank: share of communication time during which computation also ran."""
        return self._df(tn.overlap(self.timeline))
