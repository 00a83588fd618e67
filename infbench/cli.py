"""The `infbench` command: wires the verb groups together and holds no logic.

Every verb is loaded when it runs (`lazy_commands.py`), so `infbench --help` and
`infbench version` do not pay for importing DuckDB, Arrow and the load generator.
"""

from __future__ import annotations

import sys

import typer

from infbench import __version__
from infbench.exit_codes import SUMMARY as EXIT_CODES
from infbench.exit_codes import error_boundary
from infbench.lazy_commands import Lazy, lazy_group, plain_coercion

# str/int/float/bool/Path parameters converted without pydantic (typer would import it, 0.1 s,
# for every command, even for an unset --help): same values and errors, see lazy_commands.py.
plain_coercion()

_C = "infbench.commands"
COMMANDS = [
    Lazy("engine", f"{_C}.engine", "app", "The bundled reference engine."),
    Lazy("run", f"{_C}.run", "run",
         "Load-test a target and record every request and chunk in the store."),
    Lazy("runs", f"{_C}.results", "runs", "List the runs in a store, newest first."),
    Lazy("show", f"{_C}.results", "show", "Show one run: its summary and configuration."),
    Lazy("export", f"{_C}.results", "export",
         "Export a run's tables (Parquet or CSV), its diagnoses and findings included."),
    Lazy("report", f"{_C}.results", "report",
         "Write one self-contained HTML page with the run's plots (no network needed to view it)."),
    Lazy("plan", f"{_C}.plan", "app",
         "Calculators for serving: KV size, memory budget, roofline, claims, all-reduce, cost. "
         "Options take vLLM's names (--tensor-parallel-size/-tp, --dtype, --kv-cache-dtype, "
         "--max-model-len, --gpu-memory-utilization, ...)."),
    Lazy("diagnose", f"{_C}.diagnose", "app",
         "Diagnose a recorded run: `diagnose RUN` runs every playbook its data allow and ranks "
         "their findings; `diagnose PLAYBOOK RUN` runs one (runbooks: playbooks/*/*.md)."),
    Lazy("import", f"{_C}.results", "import_cmd",
         "Import an exported run into a store, or with --from another tool's results "
         "(vllm-bench, guidellm, aiperf, sglang-bench, inference-perf)."),
    Lazy("gate", f"{_C}.gate", "app",
         "Statistical performance gates: pass, fail or inconclusive, with intervals."),
    Lazy("compare", f"{_C}.gate", "compare",
         "Side-by-side table of two runs' summaries, with the relative change."),
    Lazy("trace", f"{_C}.trace", "app",
         "Profiler traces: import PyTorch profiler / Nsight Systems traces, analyse their timelines."),
    Lazy("sweep", f"{_C}.sweep", "sweep",
         "Sweep load (concurrency or request rate) and find the knee and the goodput maximum."),
    Lazy("config", f"{_C}.config", "app",
         "Engine configurations: capture, diff ranked by impact, bisect by measurement."),
    Lazy("metrics", f"{_C}.metrics", "app",
         "Server-side metrics: pull a run's window from Prometheus into the store."),
    Lazy("probe", f"{_C}.probe", "app",
         "Probe the hardware under a server: GPU telemetry through NVML; collective and "
         "point-to-point link bandwidth (nccl-tests' busbw), nccl-tests output imported."),
]

app = typer.Typer(
    cls=lazy_group(COMMANDS),
    help=f"Benchmark and diagnose LLM inference endpoints.\n\n{EXIT_CODES}",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # typer validates its --install-completion options with pydantic (150 ms on every start),
    # and its rich help formatter costs as much again: the top level is listed plainly.
    add_completion=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    # A callback makes `infbench` a group even with one eagerly registered command.
    pass


@app.command("version")
def version() -> None:
    """Print the infbench version."""
    typer.echo(__version__)


def main() -> None:
    # `infbench version` in a CI log answers without building the command group at all.
    if sys.argv[1:] == ["version"]:
        sys.stdout.write(f"{__version__}\n")
        return
    with error_boundary():
        app()


if __name__ == "__main__":
    main()
