"""`infbench plan specdec` through the real CLI: its table, JSON, help example, bad input."""

from __future__ import annotations

import json
import re
import shlex

from typer.testing import CliRunner

from infbench.cli import app

runner = CliRunner()


def test_json_has_a_row_per_batch_and_the_crossover() -> None:
    r = runner.invoke(app, ["plan", "specdec", "-m", "qwen2.5-3b", "-g", "a100", "-a", "0.55",
                            "-k", "6", "--batch-sizes", "2,32,200,700", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [row["batch"] for row in data["rows"]] == [2, 32, 200, 700]
    assert data["expected_tokens"] == (1 - 0.55 ** 7) / (1 - 0.55)
    assert data["costs_above"] in (200, 700)
    assert data["resolved"]["gpu"]["name"] == "A100-80GB-SXM"


def test_help_example_runs_and_says_where_speculation_stops_paying() -> None:
    help_text = runner.invoke(app, ["plan", "specdec", "--help"], env={"COLUMNS": "300"}).stdout
    line = next(x.strip() for x in help_text.splitlines() if x.strip().startswith("infbench plan specdec"))
    r = runner.invoke(app, shlex.split(line)[1:])
    assert r.exit_code == 0, r.stderr
    assert re.search(r"K=4 costs throughput from batch \d+|K=4 pays at every batch size", r.stdout)


def test_bad_input_is_one_line_with_exit_2() -> None:
    for args, needle in ((["-a", "-0.1"], "acceptance: -0.1 is not in [0, 1]"),
                         (["-a", "0.5", "--batch-sizes", "0,4"], "--batch-sizes: expected"),
                         (["-a", "0.5", "-k", "0"], "num_speculative_tokens: 0 must be >= 1")):
        r = runner.invoke(app, ["plan", "specdec", "-m", "llama-3.1-8b", "-g", "h100", *args])
        assert r.exit_code == 2, r.stdout
        assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1
