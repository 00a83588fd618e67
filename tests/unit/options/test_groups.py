"""Option groups: a command that takes groups shows typer their fields as options (names,
defaults, help kept), gets each group built from the values given, and `run` and `sweep`
declare the options they share once, so they cannot drift."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from infbench.cli import COMMANDS
from infbench.options.groups import OptionGroup, grouped, option
from infbench.options.measured import (
    LoadOptions,
    OutputOptions,
    SweepLoadOptions,
    SweepOutputOptions,
    SweepPlanOptions,
    TargetOptions,
    TelemetryOptions,
    WorkloadOptions,
    sweep_request,
)


@dataclass(frozen=True)
class Alpha(OptionGroup):
    PANEL = "Alpha"
    name: str = option("a", help="A name.")
    tags: list[str] = option([], help="A tag (repeatable).")
    size: int = option(3, help="A size.")


@dataclass(frozen=True)
class Beta(Alpha):
    size: int = option(7, help="Another size.")


def _app(func: Any) -> typer.Typer:
    app = typer.Typer()
    app.command()(grouped(func))
    return app


def test_a_command_gets_its_groups_built_and_its_own_options_as_given() -> None:
    seen: list[Any] = []

    def cmd(first: Alpha, verbose: bool = typer.Option(False, "--verbose", help="Talk.")) -> None:
        """Do it."""
        seen.append((first, verbose))

    r = CliRunner().invoke(_app(cmd), ["--name", "x", "--tags", "p", "--tags", "q", "--verbose"])
    assert r.exit_code == 0, r.output
    assert seen == [(Alpha("x", ["p", "q"], 3), True)]
    seen.clear()
    r = CliRunner().invoke(_app(cmd), [])
    assert r.exit_code == 0, r.output
    # Defaults as declared, and each call its own list.
    assert seen == [(Alpha("a", [], 3), False)] and seen[0][0].tags is not Alpha().tags


def test_a_redeclared_field_keeps_its_place_and_takes_the_new_default_and_help() -> None:
    names = [p.name for p in Beta.parameters()]
    assert names == ["name", "tags", "size"]
    size = Beta.parameters()[2].default
    assert (size.default, size.help, size.rich_help_panel) == (7, "Another size.", "Alpha")
    assert Alpha.parameters()[2].default.default == 3  # the base group is untouched


def test_an_option_two_groups_declare_is_refused_when_the_command_is_made() -> None:
    def cmd(first: Alpha, second: Beta) -> None:
        pass

    with pytest.raises(TypeError, match="declared twice: name, size, tags"):
        grouped(cmd)


def test_the_signature_typer_reads_is_the_groups_fields_then_the_own_options() -> None:
    def cmd(first: Alpha, n: int = typer.Option(1)) -> None:
        """Doc."""

    wrapped = grouped(cmd)
    sig = inspect.signature(wrapped, eval_str=True)
    assert list(sig.parameters) == ["name", "tags", "size", "n"]
    assert sig.parameters["tags"].annotation == list[str]
    assert (wrapped.__doc__, wrapped.__name__) == ("Doc.", "cmd")


def _params(name: str) -> dict[str, Any]:
    cmd = next(c for c in COMMANDS if c.name == name).load()
    return {p.name: (p.opts, p.secondary_opts, p.default, getattr(p, "help", None), p.envvar)
            for p in cmd.params}


@pytest.mark.parametrize("group", [TargetOptions, WorkloadOptions, TelemetryOptions, OutputOptions])
def test_run_and_sweep_take_the_shared_groups_alike(group: type[OptionGroup]) -> None:
    run, sweep = _params("run"), _params("sweep")
    names = [p.name for p in group.parameters()]
    assert names and all(run[n] == sweep[n] for n in names), [
        n for n in names if run[n] != sweep[n]]


def test_sweep_takes_every_target_option_run_takes_and_differs_only_where_it_means_to() -> None:
    run, sweep = _params("run"), _params("sweep")
    assert set(run) - set(sweep) == {
        "arrival", "rate", "burstiness", "concurrency",  # a sweep's points make its arrivals
        "workers", "ray", "ray_cpus", "metrics_port", "quiet", "max_error_rate"}
    differ = sorted(n for n in set(run) & set(sweep) if run[n] != sweep[n])
    assert differ == ["duration", "json_out", "num_requests", "warmup"]
    assert sweep["duration"][2] == 20.0 and run["duration"][2] is None


def _sweep(tmp_path: Path, **target: Any) -> Any:
    return sweep_request(TargetOptions(**target), WorkloadOptions(), SweepPlanOptions("concurrency", "1,2"),
                         SweepLoadOptions(), TelemetryOptions(), SweepOutputOptions(db=tmp_path / "s.duckdb"))


def test_a_sweep_over_a_fleet_runs_each_point_over_the_whole_fleet(tmp_path: Path) -> None:
    request = _sweep(tmp_path, url=["a=http://127.0.0.1:1", "b=http://127.0.0.1:2"],
                     route="share:3,1", api_key="sk-x")
    point = request.at("sw", 1, request.plan.listed[1])
    assert [r.name for r in point.target.replicas] == ["a", "b"]
    assert point.target.route.kind == "share" and point.target.api_key == "sk-x"
    assert point.arrivals.concurrency == 2 and request.target.first_url == "http://127.0.0.1:1"


@pytest.mark.parametrize(("target", "words"), [
    ({"url": ["http://127.0.0.1:1"], "route": "round-robin"}, "route: routing needs a fleet"),
    ({"url": ["http://127.0.0.1:1", "http://127.0.0.1:2"], "metrics_url": "http://m"},
     "metrics-url: a fleet scrapes"),
    ({"url": ["a=http://127.0.0.1:1", "a=http://127.0.0.1:2"]}, "url: two replicas are called 'a'"),
])
def test_a_sweeps_target_is_checked_as_a_runs(tmp_path: Path, target: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError) as err:
        _sweep(tmp_path, **target)
    assert str(err.value).startswith(words) and "\n" not in str(err.value), err.value


def test_a_group_built_directly_is_the_commands_default(tmp_path: Path) -> None:
    assert TargetOptions().spec().bundled and WorkloadOptions().spec().kind == "synthetic"
    assert LoadOptions().spec(None).seed == 0 and SweepLoadOptions().duration == 20.0
