"""Results from other benchmarking tools into the store: `infbench import --from TOOL PATH...`.

One module per tool reads its files into `model.ImportedRun`s (and says how the tool defines
each metric, and which of its numbers infbench recomputes); `writer` stores them as runs,
requests and chunks; `check` compares the recomputed summary with the tool's own. The
definitions table and the conversions are in docs/imports.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb

from infbench.imports import aiperf, guidellm, inference_perf, sglang_bench, vllm_bench
from infbench.imports.check import compare
from infbench.imports.model import BadFile, ImportedRun
from infbench.imports.writer import StoredImport, store_runs


@dataclass(frozen=True)
class Tool:
    name: str
    read: Callable[[Path], list[ImportedRun]]
    summary_pairs: Callable[[dict[str, Any]], dict[str, str]]
    definitions: dict[str, str]
    differences: dict[str, str]


def _tool(module: ModuleType) -> Tool:
    return Tool(module.TOOL, module.read, module.summary_pairs, module.DEFINITIONS, module.DIFFERENCES)


TOOLS: dict[str, Tool] = {t.name: t for t in (_tool(vllm_bench), _tool(guidellm), _tool(aiperf), _tool(sglang_bench),
                                         _tool(inference_perf))}


def read_files(tool: str, paths: Sequence[Path]) -> list[ImportedRun]:
    """Every run in `paths`, all read and checked before anything is stored."""
    if tool not in TOOLS:
        raise BadFile("--from", "option", "tool", f"{tool!r} is not one of {', '.join(TOOLS)}")
    runs = []
    for path in paths:
        if not path.exists():
            raise BadFile(path, "whole file", "(path)", "no such file or directory")
        found = TOOLS[tool].read(path)
        if not found:
            raise BadFile(path, "whole file", "(records)", f"holds no {tool} run")
        for run in found:
            if not run.requests:
                raise BadFile(path, run.record, "(requests)", "no per-request records to import")
        runs.extend(found)
    return runs


def store_imported(con: duckdb.DuckDBPyConnection, runs: list[ImportedRun]) -> list[StoredImport]:
    """Store runs `read_files` returned, in one transaction: all or nothing.

    Ownership: the caller owns `con` (opened writable) and closes it."""
    definitions = {name: t.definitions for name, t in TOOLS.items()}

    def check(run: ImportedRun, summary: dict[str, Any]) -> list[dict[str, Any]]:
        t = TOOLS[run.tool]
        return compare(run, summary, t.summary_pairs, t.differences)

    return store_runs(con, runs, definitions, check)


def import_files(con: duckdb.DuckDBPyConnection, tool: str, paths: Sequence[Path]) -> list[StoredImport]:
    """Read every file, then store every run (see `store_imported`)."""
    return store_imported(con, read_files(tool, paths))


__all__ = ["TOOLS", "BadFile", "ImportedRun", "StoredImport", "import_files", "read_files", "store_imported"]
