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

import typer

from infbench.config.capture import capture_source
from infbench.config.model import CaptureError
from infbench.config.store import ConfigNotFound, list_configs, load_config, save_config
from infbench.console import make_console, print_error
from infbench.store import StoreError, open_store

app = typer.Typer(help="Engine configurations: capture, diff ranked by impact, bisect by measurement.",
                  no_args_is_help=True)

DB_OPTION = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB).")


def _fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


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
        raise _fail(str(exc)) from None
    if engine_version:
        cap.version = engine_version
    try:
        con = open_store(db)
    except StoreError as exc:
        raise _fail(str(exc)) from None
    try:
        config_id = save_config(con, cap, label=label)
    finally:
        con.close()
    origins = {o: sum(s.origin == o for s in cap.settings.values()) for o in ("set", "default", "resolved")}
    if json_out:
        doc = {"config_id": config_id, "engine": cap.engine, "version": cap.version,
               "source_kind": cap.source_kind, "label": label, "notes": cap.notes,
               "settings": {k: {"value": s.value, "origin": s.origin, "raw_key": s.raw_key,
                                "line": s.line} for k, s in sorted(cap.settings.items())}}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return
    out = make_console()
    out.print(f"{cap.engine} {cap.version or '(version not printed)'} from {cap.source_kind}: "
              f"{len(cap.settings)} settings ({origins['set']} set, {origins['default']} default, "
              f"{origins['resolved']} resolved)")
    for note in cap.notes:
        out.print(f"note: {note}")
    out.print(f"stored in {db} as {config_id}" + (f" (label {label})" if label else ""))


@app.command("list")
def list_cmd(db: Path = DB_OPTION) -> None:
    """List the captured configurations, newest first."""
    try:
        con = open_store(db, read_only=True)
    except StoreError as exc:
        raise _fail(str(exc)) from None
    try:
        rows = list_configs(con)
    finally:
        con.close()
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
    try:
        con = open_store(db, read_only=True)
    except StoreError as exc:
        raise _fail(str(exc)) from None
    try:
        cfg = load_config(con, config)
    except ConfigNotFound as exc:
        raise _fail(str(exc)) from None
    finally:
        con.close()
    out = make_console()
    out.print(f"{cfg.config_id}: {cfg.engine} {cfg.version or ''} ({cfg.source_kind}, {cfg.source})")
    for key, s in sorted(cfg.settings.items()):
        if s.origin == "default" and not all_settings:
            continue
        where = (s.raw_key or "") + (f", line {s.line}" if s.line else "")
        out.print(f"{key} = {json.dumps(s.value, default=str)}  ({s.origin}; {where})")


def _load(con, ref: str):  # type: ignore[no-untyped-def]
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
    from infbench.config.diff import diff_sides, side_of
    from infbench.config.impact import Workload
    from infbench.config.render import to_json, to_markdown, to_text
    from infbench.config.workload import workload_from_run

    if min(concurrency, input_tokens, output_tokens) < 1 or top < 1:
        raise _fail("concurrency, input-tokens, output-tokens and top must be positive")
    try:
        con = open_store(db)
    except StoreError as exc:
        raise _fail(str(exc)) from None
    try:
        ca, cb = _load(con, a), _load(con, b)
        wl = Workload(concurrency, input_tokens, output_tokens, shared_prefix, streaming, model, gpu)
        if run is not None:
            wl = workload_from_run(con, run, wl)
    except (ConfigNotFound, CaptureError, LookupError) as exc:
        raise _fail(str(exc)) from None
    finally:
        con.close()
    meta = [{"config_id": c.config_id, "label": c.label, "engine": c.engine, "version": c.version,
             "source": c.source} for c in (ca, cb)]
    result = diff_sides(side_of(ca.engine, ca.version, ca.settings),
                        side_of(cb.engine, cb.version, cb.settings), wl, (meta[0], meta[1]))
    if markdown is not None:
        markdown.write_text(to_markdown(result), encoding="utf-8")
    sys.stdout.write(to_json(result) if json_out else to_text(result, top))
