"""`infbench plan compare` through the real CLI: the H100/H200 tables, JSON, and bad input
as one line with exit code 2."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from infbench.cli import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["plan", "compare", *args])
    return result.exit_code, result.stdout, result.stderr


def test_h100_against_h200_table() -> None:
    code, out, _ = _run("-m", "llama-3.1-8b", "-g", "H100-SXM", "--compare-gpu", "H200", "-b", "64")
    assert code == 0
    assert "gpu: H200 → H200-SXM (the SXM part)" in out
    assert "* HBM bandwidth" in out and "x1.43" in out and "x1.76" in out
    assert "  L2 cache" in out and "50 MiB" in out and "700 W" in out
    assert "decode step (batch 64, context 2048)" in out and "memory" in out
    assert "expected no slower than H100-SXM" in out and "infbench diagnose startup LOG" in out


def test_json_has_both_gpus_and_the_ratios() -> None:
    code, out, _ = _run("-m", "llama-3.1-70b", "-g", "h100", "-tp", "4", "--compare-gpu", "h200",
                        "--json")
    data = json.loads(out)
    assert code == 0 and (data["gpu_a"], data["gpu_b"], data["tp"]) == ("H100-SXM", "H200-SXM", 4)
    assert data["compare_gpu"]["name"] == "H200-SXM" and data["resolved"]["gpu"]["name"] == "H100-SXM"
    assert abs(data["spec_ratios"]["HBM bandwidth"] - 4.8 / 3.35) < 1e-9
    decode = data["regimes"][0]
    assert decode["bound"] == "memory" and "GPU link" in decode["depends_on"]
    # the all-reduces take the same time on both: the gain is below the bandwidth ratio
    assert 1.0 < decode["expected"] < 4.8 / 3.35


def test_an_unknown_gpu_is_one_line_and_exit_2() -> None:
    code, out, err = _run("-m", "llama-3.1-8b", "-g", "h100", "--compare-gpu", "V100 [bold]")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "error: unknown gpu 'V100 [bold]'; known: H100-SXM, H100-PCIe, H200-SXM, A100-80GB-SXM, "
        "A100-40GB, L40S, L4, B200, MI300X"]


def test_missing_compare_gpu_is_one_line() -> None:
    code, _, err = _run("-m", "llama-3.1-8b", "-g", "h100")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--compare-gpu" in err
