"""`infbench plan`: every calculator through the real CLI, tables, JSON and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench.cli import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["plan", *args])
    return result.exit_code, result.stdout, result.stderr


def test_help_lists_every_calculator() -> None:
    code, out, _ = _run("--help")
    assert code == 0
    for verb in ("kv", "memory", "roofline", "claim", "allreduce", "cost"):
        assert verb in out


def test_kv_table_and_json() -> None:
    code, out, _ = _run("kv", "-m", "llama-3.1-70b")
    assert code == 0 and "327,680" in out
    code, out, _ = _run("kv", "-m", "deepseek-v3", "--tp", "8", "--json")
    data = json.loads(out)
    assert (
        code == 0
        and data["bytes_per_token"] == 70_272
        and data["bytes_per_token_per_gpu"] == 70_272
    )


def test_memory_reproduces_the_70b_on_two_h100_startup_failure() -> None:
    code, out, _ = _run(
        "memory", "-m", "llama-3.1-70b", "-g", "H100 SXM", "--tp", "2", "--max-model-len", "131072"
    )
    assert code == 1  # does not fit
    assert "runs out" in out and "20.00 GiB KV cache is needed" in out
    assert "tp=4" in out and "max_model_len=" in out and "gpu_memory_utilization" in out


def test_memory_json_for_a_plan_that_fits() -> None:
    code, out, _ = _run(
        "memory", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["fits"] and data["num_blocks"] > 0 and data["max_concurrency"] > 0
    assert "layout" not in data


def test_roofline_table_and_json() -> None:
    code, out, _ = _run("roofline", "-m", "llama-3.1-8b", "-g", "h100", "-b", "32")
    assert code == 0 and "lowest ceiling" in out and "knee" in out and "TTFT" in out
    code, out, _ = _run("roofline", "-m", "llama-3.1-8b", "-g", "h100", "--json")
    data = json.loads(out)
    assert data["decode"]["seconds"] > 0 and data["ceilings"]["lowest"] and data["knee_batch"] > 0


def test_claim_table_and_json() -> None:
    code, out, _ = _run("claim", "100", "-m", "llama-3.1-70b", "-g", "h100")
    assert code == 0 and "impossible as stated" in out and "tp=8" in out
    code, out, _ = _run("claim", "100", "-m", "llama-3.1-70b", "-g", "h100", "--json")
    assert json.loads(out)["verdict"] == "impossible as stated"


def test_allreduce_table_and_json() -> None:
    code, out, _ = _run("allreduce", "-g", "h100", "-n", "8", "-m", "llama-3.1-70b")
    assert code == 0 and "ring beats tree above" in out and "all-reduces / token" in out
    code, out, _ = _run("allreduce", "--bandwidth", "100", "-n", "4", "-s", "1048576", "--json")
    data = json.loads(out)
    assert data["bandwidth"] == 100e9 and data["faster"] in ("ring", "tree")


def test_cost_table_and_json() -> None:
    code, out, _ = _run("cost", "-m", "llama-3.1-8b", "-g", "h100", "--price", "3.6")
    assert code == 0 and "$ / M output tokens" in out
    code, out, _ = _run(
        "cost",
        "-m",
        "llama-3.1-8b",
        "-g",
        "h100",
        "--price",
        "3.6",
        "--input-tps",
        "10000",
        "--output-tps",
        "1000",
        "--json",
    )
    data = json.loads(out)
    assert data["usd_per_million_output"] == pytest.approx(1.0)


def test_catalog_listings() -> None:
    code, out, _ = _run("gpus", "--json")
    assert code == 0 and any(g["name"] == "MI300X" for g in json.loads(out))
    code, out, _ = _run("models")
    assert code == 0 and "DeepSeek-V3" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("kv", "-m", "no-such-model"), "unknown model 'no-such-model'"),
        (("memory", "-m", "llama-3.1-8b", "-g", "tpu-v9"), "unknown gpu 'tpu-v9'"),
        (
            ("roofline", "-m", "llama-3.1-8b", "-g", "h100", "-b", "-4"),
            "batch must be a positive integer",
        ),
        (("kv", "-m", "llama-3.1-70b", "--tp", "3"), "tp=3 does not divide num_attention_heads=64"),
        (("cost", "-m", "llama-3.1-8b", "-g", "h100", "--price", "-1"), "price"),
        (("allreduce", "-n", "8"), "give --gpu or --bandwidth"),
    ],
)
def test_errors_are_one_line_on_stderr_with_exit_2(args: tuple[str, ...], needle: str) -> None:
    code, out, err = _run(*args)
    assert code == 2
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""


def test_bad_config_json_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000}))
    code, _, err = _run("kv", "-m", str(path))
    assert code == 2 and "missing field 'num_attention_heads'" in err
