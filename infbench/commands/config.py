"""Engine configurations: capture, diff ranked by impact, and bisect by measurement.

`infbench config capture SOURCE` reads a vLLM log, `vllm collect-env` output, an SGLang log,
a TensorRT-LLM option YAML or a live server URL into the store; `diff A B` ranks every
difference by its expected effect on the workload; `bisect` finds the culprit by running
the workload against configurations between a good and a bad one. Exit codes: 0 success,
1 a bisection that could not name a culprit, 2 bad input (nothing stored).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from infbench.command_support import fail, store_or_exit
from infbench.config.capture import capture_source
from infbench.config.model import ORIGINS, CaptureError
from infbench.config.store import ConfigNotFound, list_configs, load_config, save_config
from infbench.console import make_console

if TYPE_CHECKING:
    import duckdb

app = typer.Typer(help="Engine configurations: capture, diff ranked by impact, bisect by measurement.",
                  no_args_is_help=True, add_completion=False)

DB_OPTION = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB).")


@app.command("capture")
def capture(
    source: str = typer.Argument(..., help="A server log, `vllm collect-env` output, SGLang log, TensorRT-LLM option YAML, or http://HOST:PORT of a running server."),
    db: Path = DB_OPTION,
    label: str | None = typer.Option(None, help="A name to refer to this configuration by (diff, bisect)."),
    engine_version: str | None = typer.Option(None, help="The engine version, when the source does not print it (SGLang, TensorRT-LLM files)."),
    kind: str | None = typer.Option(None, help="vllm_log | vllm_collect_env | sglang_log | trtllm_yaml (default: recognised from the content)."),
    api_key: str | None = typer.Option(None, envvar="OPENAI_API_KEY", help="Bearer key for a URL (never stored)."),
    json_out: bool = typer.Option(False, "--json", help="Print the captured settings as JSON."),
) -> None:
    """Capture an engine configuration from a log, a config file or a running server."""
    try:
        cap = capture_source(source, kind=kind, api_key=api_key)
    except CaptureError as exc:
        raise fail(str(exc)) from None
    if engine_version:
        cap.version = engine_version
    with store_or_exit(db) as con:
        config_id = save_config(con, cap, label=label)
    origins = {o: sum(s.origin == o for s in cap.settings.values()) for o in ORIGINS}
    if json_out:
        doc = {"config_id": config_id, "engine": cap.engine, "version": cap.version,
               "source_kind": cap.source_kind, "label": label, "notes": cap.notes,
               "settings": {k: {"value": s.value, "origin": s.origin, "raw_key": s.raw_key,
                                "line": s.line} for k, s in sorted(cap.settings.items())},
               "printed_then_resolved": {k: {"printed": s.value, "origin": s.origin, "line": s.line,
                                             "final": cap.settings[k].value}
                                         for k, s in sorted(cap.printed.items())}}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return
    out = make_console()
    out.print(f"{cap.engine} {cap.version or '(version not printed)'} from {cap.source_kind}: "
              f"{len(cap.settings)} settings (" + ", ".join(f"{n} {o}" for o, n in origins.items())
              + ")" + (f"; {len(cap.printed)} printed at start-up, then resolved to another value"
                       if cap.printed else ""))
    for note in cap.notes:
        out.print(f"note: {note}")
    out.print(f"stored in {db} as {config_id}" + (f" (label {label})" if label else ""))


@app.command("list")
def list_cmd(db: Path = DB_OPTION) -> None:
    """List the captured configurations, newest first."""
    with store_or_exit(db, read_only=True) as con:
        rows = list_configs(con)
    out = make_console()
    if not rows:
        out.print(f"no configurations in {db} (capture one with `infbench config capture SOURCE`)")
    for r in rows:
        extra = "".join(f" {k} {v}" for k, v in (("label", r[5]), ("run", r[6])) if v)
        out.print(f"{r[0]}  {str(r[1])[:19]}  {r[2]} {r[3] or '-'}  {r[4]}  {r[7]} settings{extra}")


@app.command("show")
def show(
    config: str = typer.Argument(..., help="Config id (or unique prefix), label, run id, or 'last'."),
    db: Path = DB_OPTION,
    all_settings: bool = typer.Option(False, "--all", help="Also list settings at the engine's default."),
) -> None:
    """Show one captured configuration: every setting, its value and where it came from."""
    with store_or_exit(db, read_only=True) as con:
        try:
            cfg = load_config(con, config)
        except ConfigNotFound as exc:
            raise fail(str(exc)) from None
    out = make_console()
    out.print(f"{cfg.config_id}: {cfg.engine} {cfg.version or ''} ({cfg.source_kind}, {cfg.source})")
    for key, s in sorted(cfg.settings.items()):
        if s.origin == "default" and not all_settings:
            continue
        where = (s.raw_key or "") + (f", line {s.line}" if s.line else "")
        was = cfg.printed.get(key)
        then = "" if was is None else (f"; printed {json.dumps(was.value, default=str)} ({was.origin}"
                                       + (f", line {was.line}" if was.line else "") + "), resolved later")
        out.print(f"{key} = {json.dumps(s.value, default=str)}  ({s.origin}; {where}{then})")


def _load(con: duckdb.DuckDBPyConnection, ref: str) -> Any:
    """A stored config by id/label/run/'last', or a file/URL captured (and stored) now."""
    if Path(ref).is_file() or ref.startswith(("http://", "https://")):
        cap = capture_source(ref)
        return load_config(con, save_config(con, cap, label=None))
    return load_config(con, ref)


@app.command("diff")
def diff(
    a: str = typer.Argument(..., help="Config A (the good/old one): id, label, run id, 'last', or a log/file/URL to capture."),
    b: str = typer.Argument(..., help="Config B (the bad/new one), the same forms."),
    db: Path = DB_OPTION,
    concurrency: int = typer.Option(32, help="Workload: requests in flight."),
    input_tokens: int = typer.Option(1024, help="Workload: prompt tokens per request."),
    output_tokens: int = typer.Option(256, help="Workload: output tokens per request."),
    shared_prefix: bool = typer.Option(False, help="Workload: prompts share prefixes (system prompt, multi-turn)."),
    streaming: bool = typer.Option(True, help="Workload: responses are streamed."),
    run: str | None = typer.Option(None, help="Take the workload from a stored run (its concurrency and lengths)."),
    model: str | None = typer.Option(None, help="Model for pricing (default: the configs' own)."),
    gpu: str | None = typer.Option(None, help="GPU for pricing (default: the configs' own, e.g. from collect-env)."),
    top: int = typer.Option(15, help="Differences shown in the terminal."),
    json_out: bool = typer.Option(False, "--json", help="Print the ranked diff as JSON."),
    markdown: Path | None = typer.Option(None, help="Write the ranked diff as Markdown here."),
) -> None:
    """Rank every difference between two configurations by its expected impact on a workload."""
    from infbench.config.diff import diff_sides, side_from
    from infbench.config.impact import Workload
    from infbench.config.render import to_json, to_markdown, to_text
    from infbench.config.workload import workload_from_run

    if min(concurrency, input_tokens, output_tokens) < 1 or top < 1:
        raise fail("concurrency, input-tokens, output-tokens and top must be positive")
    with store_or_exit(db) as con:
        try:
            ca, cb = _load(con, a), _load(con, b)
            wl = Workload(concurrency, input_tokens, output_tokens, shared_prefix, streaming, model, gpu)
            if run is not None:
                wl = workload_from_run(con, run, wl)
        except (ConfigNotFound, CaptureError, LookupError) as exc:
            raise fail(str(exc)) from None
    meta = [{"config_id": c.config_id, "label": c.label, "engine": c.engine, "version": c.version,
             "source_kind": c.source_kind, "source": c.source} for c in (ca, cb)]
    result = diff_sides(side_from(ca), side_from(cb), wl, (meta[0], meta[1]))
    if markdown is not None:
        markdown.write_text(to_markdown(result), encoding="utf-8")
    sys.stdout.write(to_json(result) if json_out else to_text(result, top))


@app.command("bisect")
def bisect_cmd(
    good: str = typer.Option(..., help="The good configuration: config id, label, run id, or a log/file/URL to capture."),
    bad: str = typer.Option(..., help="The bad configuration, the same forms."),
    launch: str = typer.Option(..., help="Command that starts the engine in its GOOD configuration; {port} is replaced by a free port, {args} by the flags of the settings a probe takes from BAD, {python} by this Python. E.g. '{python} -m reference_engine --port {port} --defaults ref-1 {args}' or 'vllm serve MODEL --port {port} {args}'."),
    db: Path = DB_OPTION,
    health: str = typer.Option("/health", help="Path that answers 200 once the engine is ready."),
    start_timeout: float = typer.Option(180.0, help="Seconds the engine may take to become healthy."),
    num_requests: int = typer.Option(64, help="Requests per probe run (doubled when a verdict is inconclusive)."),
    concurrency: int = typer.Option(16, help="Closed-loop concurrency of every probe run."),
    input_tokens: str = typer.Option("uniform:32:128", help="Input lengths, as for `infbench run`."),
    output_tokens: str = typer.Option("uniform:8:24", help="Output lengths, as for `infbench run`."),
    seed: int = typer.Option(0, help="Seed of every probe run (the same requests each time)."),
    run_arg: list[str] = typer.Option([], help="Extra option for every `infbench run` (repeatable), e.g. --run-arg=--endpoint --run-arg=chat."),
    keys: str | None = typer.Option(None, help="Bisect only these differing settings (comma-separated)."),
    flag: list[str] = typer.Option([], help="KEY=FLAG: the command-line flag that sets KEY (default --key-with-dashes); repeatable."),
    rules: Path | None = typer.Option(None, help="gates.toml deciding each probe (default: the gate's default rules with --run-noise)."),
    run_noise: str = typer.Option("1%", help="Run-to-run drift added to every comparison when --rules is not given."),
    max_doublings: int = typer.Option(2, help="Times an inconclusive probe is rerun with twice the requests."),
    markdown: Path | None = typer.Option(None, help="Write the path the bisection took as Markdown here."),
    json_out: bool = typer.Option(False, "--json", help="Print the outcome as JSON on stdout."),
) -> None:
    """Find the setting (or combination) that causes a regression, by launching and measuring."""
    import dataclasses

    from infbench.config.bisect import Bisection, budget
    from infbench.config.launch import Launcher, LaunchError, LoadSpec
    from infbench.gate import RulesError, load_rules
    from infbench.gate.rules import parse_noise

    err = make_console(stderr=True)
    if min(num_requests, concurrency) < 1 or max_doublings < 0 or start_timeout <= 0:
        raise fail("num-requests and concurrency must be positive, max-doublings >= 0, start-timeout > 0")
    names: dict[str, str] = {}
    for item in flag:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.startswith("-"):
            raise fail(f"flag: {item!r} is not KEY=--flag")
        names[key] = value
    try:
        ruleset = load_rules(rules)
        if rules is None:
            ruleset = dataclasses.replace(ruleset, settings=dataclasses.replace(
                ruleset.settings, run_noise=parse_noise(run_noise, "run-noise")))
    except RulesError as exc:
        raise fail(str(exc)) from None
    with store_or_exit(db) as con:
        try:
            cg, cb = _load(con, good), _load(con, bad)
        except (ConfigNotFound, CaptureError) as exc:
            raise fail(str(exc)) from None
    launcher = Launcher(launch, health, start_timeout, flag_names=names)
    load = LoadSpec(num_requests, concurrency, input_tokens, output_tokens, seed, tuple(run_arg))
    try:
        job = Bisection(db, cg, cb, launcher, load, ruleset,
                        keys=[k.strip() for k in keys.split(",") if k.strip()] if keys else None,
                        max_doublings=max_doublings, say=lambda m: err.print(m))
    except ValueError as exc:
        raise fail(str(exc)) from None
    probes, runs = budget(len(job.keys), max_doublings)
    err.print(f"bisecting {len(job.keys)} differing settings: {', '.join(job.keys) or 'none'}")
    err.print(f"budget: at most {probes} probes (ddmin's worst case n^2+3n), {runs} runs of "
              f"{num_requests}+ requests; one culprit usually takes about {2 * max(1, len(job.keys)).bit_length()} probes")
    try:
        result = job.run()
    except LaunchError as exc:
        raise fail(f"bisection {job.id} stopped: {exc}") from None
    out = make_console()
    if json_out:
        doc = {"bisection_id": result.bisection_id, "status": result.status, "culprit": result.culprit,
               "culprit_values": {k: job.values[k] for k in result.culprit}, "keys": result.keys,
               "budget_probes": probes, "budget_runs": result.budget_runs, "runs_used": result.runs_used,
               "steps": [dataclasses.asdict(s) for s in result.steps]}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    lines = [f"bisection {result.bisection_id}: {result.status}"
             + (f": {' + '.join(f'{k} = {json.dumps(job.values[k])}' for k in result.culprit)}"
                if result.culprit else ""),
             f"runs used: {result.runs_used} of the {result.budget_runs} announced"]
    lines += [f"  {i}. {', '.join(s.keys)} -> {s.verdict}: {s.reason}" for i, s in enumerate(result.steps, 1)]
    for line in lines:
        (err if json_out else out).print(line)
    if markdown is not None:
        md = [f"## infbench config bisect {result.bisection_id}: {result.status}", "",
              f"Good `{cg.name}`, bad `{cb.name}`; {len(job.keys)} differing settings; "
              f"{result.runs_used} of {result.budget_runs} runs.", "",
              "| # | settings from bad | verdict | measured | runs |", "| --- | --- | --- | --- | --- |"]
        md += [f"| {i} | {', '.join(f'`{k}`' for k in s.keys)} | {s.verdict} | {s.reason} | "
               f"{', '.join(s.runs)} |" for i, s in enumerate(result.steps, 1)]
        markdown.write_text("\n".join(md) + "\n", encoding="utf-8")
    if result.status != "found":
        raise typer.Exit(1)
