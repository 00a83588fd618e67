"""The one engine-setup resolver: the flags each playbook's own table read before (the stalls
playbook's: model, GPU, dtype, KV dtype, TP, token budget, step overhead; MBU's: quantization,
max_num_seqs, --enforce-eager, capture sizes), precedence, and the stalls and MBU playbooks
agreeing on the formats they compute with."""

from __future__ import annotations

from typing import Any

import pytest

from playbooks.engine_setup import engine_args, engine_setup
from playbooks.mbu.setup import resolve_setup


@pytest.mark.parametrize("args, expected", [
    # the stalls playbook's table (playbooks/context.py had it)
    (["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM"],
     {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM"}),
    (["--dtype=float16", "--kv-cache-dtype", "fp8"], {"dtype": "float16", "kv_cache_dtype": "fp8"}),
    (["-tp", "4", "--max-num-batched-tokens=2048"],
     {"tensor_parallel_size": "4", "max_num_batched_tokens": "2048"}),
    (["--tensor-parallel-size=2", "--step-overhead-ms", "3.5"],
     {"tensor_parallel_size": "2", "step_overhead_ms": "3.5"}),
    # MBU's table (playbooks/mbu/setup.py had it)
    (["--quantization", "awq", "--max-num-seqs", "64"], {"quantization": "awq", "max_num_seqs": "64"}),
    (["--enforce-eager", "--model", "m"], {"enforce_eager": True, "model": "m"}),
    (["--enforce-eager=false", "--gpu=A100-80GB"], {"enforce_eager": "false", "gpu": "A100-80GB"}),
    # what neither read is skipped, a value flag at the very end has no value to take
    (["--port", "8000", "--seed", "3", "--model"], {}),
    (["--host", "127.0.0.1", "--swap-space", "4", "-tp", "8"], {"tensor_parallel_size": "8"}),
])
def test_engine_command_lines(args: list[str], expected: dict[str, Any]) -> None:
    assert engine_args(args) == expected


def _cfg(engine: dict[str, Any] | None = None, args: list[str] | None = None) -> dict[str, Any]:
    return {"engine_config": {k: {"value": v} for k, v in (engine or {}).items()},
            "target": {"engine_args": args or []}}


def test_precedence_user_then_engine_config_then_command_line_then_served_name() -> None:
    cfg = _cfg({"gpu": "H200", "tensor_parallel_size": 2},
               ["--gpu", "A100-80GB", "-tp", "8", "--model", "from-args", "--max-num-seqs", "12"])
    s = engine_setup(cfg, "served", {"model": "user-model", "gpu": None})
    assert (s.model, s.gpu, s.tensor_parallel_size, s.max_num_seqs) == ("user-model", "H200", 2, 12)
    assert s.source == {"gpu": "engine config", "tensor_parallel_size": "engine config",
                        "model": "command-line option", "max_num_seqs": "engine command line"}
    s = engine_setup(_cfg(), "served")
    assert (s.model, s.source) == ("served", {"model": "served model name"})
    assert engine_setup(_cfg(args=["--model", "a"]), "served").model == "a"


@pytest.mark.parametrize("engine, args, weights, kv", [
    ({}, [], "bf16", "bf16"),
    ({"dtype": "auto"}, [], "bf16", "bf16"),
    ({"dtype": "bfloat16", "kv_cache_dtype": "fp8"}, [], "bf16", "fp8"),
    ({}, ["--dtype", "half"], "fp16", "fp16"),
    ({"quantization": "fp8"}, ["--dtype", "float16"], "fp8", "fp16"),
    ({}, ["--quantization", "awq", "--kv-cache-dtype", "fp8"], "awq", "fp8"),
])
def test_formats_and_both_playbooks_agree(engine: dict[str, Any], args: list[str], weights: str,
                                          kv: str) -> None:
    cfg = _cfg({"gpu": "H100-SXM", **engine}, ["-tp", "2", *args])
    stalls = engine_setup(cfg, "meta-llama/Llama-3.1-8B")
    mbu = resolve_setup(cfg, "meta-llama/Llama-3.1-8B", {})
    assert (stalls.weight_format, stalls.kv_format) == (weights, kv)
    assert (mbu.weight_format, mbu.kv_format, mbu.tp, mbu.model, mbu.gpu) == (
        weights, kv, stalls.tensor_parallel_size, stalls.model, stalls.gpu)


@pytest.mark.parametrize("engine, args, key, origin", [
    ({"tensor_parallel_size": "two"}, [], "tensor_parallel_size", "engine config"),
    ({}, ["--max-num-seqs", "lots"], "max_num_seqs", "engine command line"),
    ({}, ["--max-num-batched-tokens=1e3"], "max_num_batched_tokens", "engine command line"),
])
def test_a_setting_that_is_not_an_integer_is_named_with_its_origin(
        engine: dict[str, Any], args: list[str], key: str, origin: str) -> None:
    cfg = _cfg({"gpu": "H100-SXM", **engine}, args)
    for resolve in (lambda: engine_setup(cfg, "m"), lambda: resolve_setup(cfg, "m", {})):
        with pytest.raises(ValueError, match=f"^{key}: .* from the {origin} is not an integer$"):
            resolve()


def test_mbu_extends_it_with_capture_sizes_and_requires_model_and_gpu() -> None:
    sizes = {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 512], "cudagraph_max_capture_size": 16}
    cfg = _cfg({"gpu": "H100-SXM", **sizes}, ["--max-num-seqs", "32"])
    s = resolve_setup(cfg, "m", {})
    assert s.capture_sizes == (1, 2, 4, 8, 16) and s.max_num_seqs == 32
    assert s.source == {"gpu": "engine config", "cudagraph_capture_sizes": "engine config",
                        "cudagraph_max_capture_size": "engine config",
                        "max_num_seqs": "engine command line", "model": "served model name"}
    assert resolve_setup(_cfg({"gpu": "H100-SXM", **sizes}, ["--enforce-eager"]), "m", {}).capture_sizes == ()
    assert resolve_setup(_cfg({"gpu": "H100-SXM", **sizes}, ["--enforce-eager=true"]), "m",
                         {}).capture_sizes == ()
    with pytest.raises(ValueError, match="--gpu"):
        resolve_setup(_cfg(), "m", {})
    with pytest.raises(ValueError, match="--model"):
        resolve_setup(_cfg({"gpu": "H100-SXM"}), None, {})
