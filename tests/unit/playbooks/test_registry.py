"""The playbook registry: what a run needs for the triage to run each playbook (and the reason
said either way), the CLI's verbs from the registration, and a playbook added by registration
alone (its verb built from its options type)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest
import typer
from typer.testing import CliRunner

from infbench.cli import app as cli_app
from infbench.commands.diagnose import CUSTOM_VERBS
from infbench.commands.diagnose import app as diagnose_app
from infbench.commands.diagnose.generic import build_verb
from infbench.commands.diagnose.show import _subject
from infbench.store import get_run
from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.registry import BY_NAME, PLAYBOOKS, ROW_KINDS, Needs, Playbook, cli_fields
from playbooks.triage.inventory import _COUNTS
from tests.support.stores import new_store
from tests.support.synthetic_runs import write_timeline

ONE = {"requests": 40, "replicas": 1}
FLEET = {"requests": 40, "replicas": 3}


@pytest.mark.parametrize("name, counts, gpu, runs, why", [
    ("stalls", ONE, None, True, "the client timeline of every request"),
    ("stalls", {"requests": 0}, None, False, "no requests recorded"),
    ("mbu", ONE, "H100-SXM", True, "the GPU (H100-SXM) and model (m-7b) are known"),
    ("mbu", ONE, None, False, "no GPU model known for this run (give --gpu when running)"),
    ("mbu", {"requests": 0}, "A100", False, "no GPU model known for this run (give --gpu when running)"),
    ("memory", {**ONE, "engine_steps": 5}, None, True, "memory series or a step log"),
    ("memory", {**ONE, "memory_samples": 1}, None, True, "memory series or a step log"),
    ("memory", ONE, None, False, "neither memory series nor a step log"),
    ("memory", {**FLEET, "memory_samples": 9}, None, False, "a fleet run (the memory playbook reads one engine)"),
    ("memory", FLEET, None, False, "a fleet run (the memory playbook reads one engine)"),
    ("replicas", FLEET, None, True, "a fleet of 3 replicas"),
    ("replicas", {"requests": 7, "replicas": 2}, None, True, "a fleet of 2 replicas"),
    ("replicas", ONE, None, False, "one target"),
    ("config", {**ONE, "configs": 1}, None, True, "the engine's configuration is linked"),
    ("config", ONE, None, False, "no configuration linked"),
    ("config", {**FLEET, "configs": 2}, None, False, "a fleet run (the config playbook reads one engine's)"),
    ("hang", {**ONE, "hang_captures": 1}, None, True, "a hang capture is linked"),
    ("hang", ONE, None, False, "no hang capture linked"),
    ("startup", {**ONE, "startup_logs": 2}, None, True, "a start-up log is linked"),
    ("links", {**FLEET, "link_probes": 1}, None, True, "a link probe is linked"),
    ("links", ONE, None, False, "no link probe linked"),
])
def test_what_each_playbook_needs(name: str, counts: dict[str, int], gpu: str | None,
                                  runs: bool, why: str) -> None:
    assert BY_NAME[name].needs.check(counts, gpu, "m-7b") == (runs, why)


def test_the_row_kinds_a_playbook_may_need_are_what_the_inventory_counts() -> None:
    assert set(ROW_KINDS) == set(_COUNTS) - {"replicas"}


def test_needs_name_only_rows_the_inventory_counts_and_say_why_a_fleet_is_skipped() -> None:
    with pytest.raises(ValueError, match="spec_tokens"):
        Needs("x", "y", rows=("requests", "spec_tokens"))
    with pytest.raises(ValueError, match="fleet run"):
        Needs("x", "y", rows=("requests",), engines="one")


def test_every_registered_playbook_is_a_verb_and_every_written_verb_is_registered() -> None:
    commands = list(typer.main.get_group(diagnose_app).commands)
    assert commands == ["all", *(p.command for p in PLAYBOOKS)]
    assert set(CUSTOM_VERBS) <= {p.command for p in PLAYBOOKS}
    built = [p.name for p in PLAYBOOKS if p.command not in CUSTOM_VERBS]
    assert built and all(BY_NAME[n].help for n in built)  # a built verb's --help is its registration's


@dataclass
class _ToyOptions:
    threshold_ms: float = field(default=20.0, metadata={"help": "Gap (ms) that counts."})
    window: int = field(default=3, metadata={"flag": "--win", "help": "Steps per window."})
    label: str | None = field(default=None, metadata={"help": "A name to print."})
    tags: list[str] = field(default_factory=list, metadata={"help": "Tags (repeat)."})
    internal: float = 0.5  # no help: not offered on the CLI

    def validate(self) -> None:
        if not self.threshold_ms > 0:
            raise ValueError(f"threshold_ms: must be > 0, got {self.threshold_ms:g}\nsecond line")


def _toy(con: duckdb.DuckDBPyConnection, ref: str, options: _ToyOptions) -> Diagnosis:
    run = get_run(con, ref)
    diag = Diagnosis("toy", run.run_id, {"requests": True})
    diag.findings.append(Finding(
        "toy_finding", f"Toy at {options.threshold_ms:g} ms", 0.8, "warning",
        f"window={options.window} label={options.label} tags={options.tags} "
        f"internal={options.internal}",
        [Evidence("rows", {"n": 1}, "SELECT 1")], ["look"]))
    return diag


TOY = Playbook("toy", _ToyOptions, _toy, Needs("always", "never", rows=("requests",)),
               help="A toy playbook: says what it was given.", argument_help="The run.")


@pytest.fixture()
def toy_cli(tmp_path: Path) -> tuple[typer.Typer, Path]:
    db = tmp_path / "toy.duckdb"
    con = new_store(db)
    write_timeline(con, requests=4, concurrency=2, tokens=6)
    con.close()
    app = typer.Typer(add_completion=False)

    @app.callback()
    def _group() -> None:
        pass

    app.command("toy")(build_verb(TOY))
    return app, db


def test_a_registered_playbook_gets_a_verb_from_its_options_type(toy_cli: tuple[typer.Typer, Path]) -> None:
    app, db = toy_cli
    assert [f.flag for f in cli_fields(_ToyOptions)] == ["--threshold-ms", "--win", "--label", "--tags"]
    r = CliRunner().invoke(app, ["toy", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for text in ("A toy playbook: says what it was given.", "The run.", "--threshold-ms",
                 "Gap (ms) that counts.", "--win", "Steps per window.", "--tags", "--json",
                 "--sql", "--save"):
        assert text in r.stdout, text
    assert "--internal" not in r.stdout
    r = CliRunner().invoke(app, ["toy", "last", "--db", str(db), "--threshold-ms", "7.5",
                                 "--win", "9", "--tags", "a", "--tags", "b", "--json", "--no-save"])
    assert r.exit_code == 0, r.output
    f = json.loads(r.stdout)["findings"][0]
    assert f["title"] == "Toy at 7.5 ms"
    assert f["summary"] == "window=9 label=None tags=['a', 'b'] internal=0.5"
    r = CliRunner().invoke(app, ["toy", "last", "--db", str(db)])
    assert r.exit_code == 0 and "saved 1 finding(s)" in r.stdout, r.output
    assert "Toy at 20 ms" in r.stdout and "window=3" in r.stdout


def test_a_built_verb_says_bad_options_in_one_line_exit_2(toy_cli: tuple[typer.Typer, Path]) -> None:
    app, db = toy_cli
    r = CliRunner().invoke(app, ["toy", "last", "--db", str(db), "--threshold-ms", "-1"])
    assert r.exit_code == 2
    # the whole message, its line break written as a backslash and n: one line, nothing cut
    assert r.stderr.strip().splitlines() == ["error: threshold_ms: must be > 0, got -1\\nsecond line"]


def test_a_built_verb_refuses_a_field_named_like_its_own_parameters() -> None:
    @dataclass
    class Clash:
        db: str = field(default="x", metadata={"help": "clashes with --db"})

        def validate(self) -> None:
            return None

    with pytest.raises(ValueError, match="db"):
        build_verb(Playbook("clash", Clash, _toy, Needs("a", "b"), help="h"))


@pytest.mark.parametrize("playbook, run_id, context, said", [
    ("startup", "abc123", {"log_id": "abc123"}, "start-up log [bold]abc123[/]"),
    ("startup", "run9", {"log_id": "abc123"}, "run [bold]run9[/]"),
    ("hang", "", {"capture_id": "cap7"}, "capture [bold]cap7[/]"),
    ("hang", "run4", {"capture_id": "cap7"}, "run [bold]run4[/]"),
    ("stalls", "run1", {"log_id": "run1"}, "run [bold]run1[/]"),
    ("triage", "run2", {}, "run [bold]run2[/]"),
])
def test_show_names_what_the_diagnosis_is_about(playbook: str, run_id: str,
                                               context: dict[str, str], said: str) -> None:
    diag = Diagnosis(playbook, run_id, {})
    diag.context = dict(context)
    assert _subject(diag) == said


def test_the_cli_lists_the_registered_playbooks_in_order() -> None:
    r = CliRunner().invoke(cli_app, ["diagnose", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    at = [r.stdout.index(f" {p.command} ") for p in PLAYBOOKS]
    assert at == sorted(at)
