"""`infbench plan` under vLLM's option names, the names it resolved, bad input, and the
examples its help texts and the README give, all through the real CLI."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from infbench.cli import app
from tests.support.docs import bash_blocks, section

VERBS = ("kv", "memory", "roofline", "claim", "allreduce", "cost", "gpus", "models")
runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["plan", *args])
    return result.exit_code, result.stdout, result.stderr


def _json(*args: str) -> dict[str, Any]:
    code, out, err = _run(*args, "--json")
    assert code == 0, err
    data = json.loads(out)
    data.pop("resolved", None)  # how the names were spelled; the numbers must not differ
    return data


# (old spelling, vLLM spelling) of the same settings, per calculator
SAME_SETTINGS = [
    (("kv", "-m", "llama-3.1-70b", "--tp", "4", "--kv-dtype", "fp8", "--block-size", "32"),
     ("kv", "-m", "llama-3.1-70b", "-tp", "4", "--kv-cache-dtype", "fp8", "--block-size", "32")),
    (("kv", "-m", "qwen2.5-7b", "--tp", "2"),
     ("kv", "-m", "qwen2.5-7b", "--tensor-parallel-size", "2")),
    (("memory", "-m", "llama-3.1-70b", "-g", "h100", "--tp", "4", "--weights", "fp8",
      "--kv-dtype", "fp8", "--max-model-len", "65536", "--gpu-memory-utilization", "0.85",
      "--block-size", "32", "--max-num-seqs", "128", "--max-num-batched-tokens", "4096"),
     ("memory", "-m", "llama-3.1-70b", "-g", "h100", "--tensor-parallel-size", "4", "--dtype",
      "fp8", "--kv-cache-dtype", "fp8", "--max-model-len", "65536", "--gpu-memory-utilization",
      "0.85", "--block-size", "32", "--max-num-seqs", "128", "--max-num-batched-tokens", "4096")),
    (("roofline", "-m", "llama-3.1-8b", "-g", "h100", "--tp", "2", "--weights", "fp8",
      "--kv-dtype", "fp8", "--chunk", "4096", "-b", "16"),
     ("roofline", "-m", "llama-3.1-8b", "-g", "h100", "-tp", "2", "--dtype", "fp8",
      "--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "4096", "-b", "16")),
    (("claim", "150", "-m", "llama-3.1-70b", "-g", "h200", "--tp", "4", "--weights", "fp8",
      "--kv-dtype", "fp8"),
     ("claim", "150", "-m", "llama-3.1-70b", "-g", "h200", "-tp", "4", "--dtype", "fp8",
      "--kv-cache-dtype", "fp8")),
    (("allreduce", "-g", "h100", "-n", "4", "-m", "llama-3.1-70b"),
     ("allreduce", "-g", "h100", "-tp", "4", "-m", "llama-3.1-70b")),
    (("allreduce", "--bandwidth", "100", "--n", "2"),
     ("allreduce", "--bandwidth", "100", "--tensor-parallel-size", "2")),
    (("cost", "-m", "llama-3.1-8b", "-g", "h100", "--price", "3", "--tp", "2", "--weights",
      "fp8", "--kv-dtype", "fp8", "--chunk", "2048"),
     ("cost", "-m", "llama-3.1-8b", "-g", "h100", "--price", "3", "-tp", "2", "--dtype", "fp8",
      "--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "2048")),
]


@pytest.mark.parametrize(("old", "vllm"), SAME_SETTINGS, ids=lambda a: " ".join(a[:1]))
def test_vllm_option_names_give_the_same_numbers(old: tuple[str, ...],
                                                   vllm: tuple[str, ...]) -> None:
    assert _json(*old) == _json(*vllm)


@pytest.mark.parametrize("verb", ["kv", "memory", "roofline", "claim", "cost"])
def test_pipeline_parallel_size_is_taken_as_1_and_refused_above(verb: str) -> None:
    args = next(a for a in DEFAULTS if a[0] == verb)
    assert _json(*args, "-pp", "1") == _json(*args, "--pipeline-parallel-size", "1") == _json(*args)
    code, out, err = _run(*args, "-pp", "2")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--pipeline-parallel-size 2: pipeline parallelism is not modelled" in err


# the new default ("auto") against the old one, spelled out: the numbers must not move
DEFAULTS = [
    ("kv", "-m", "gemma-2-9b"),
    ("memory", "-m", "llama-3.1-8b", "-g", "h100"),
    ("roofline", "-m", "mixtral", "-g", "h100", "--tp", "2"),
    ("claim", "50", "-m", "deepseek-v3", "-g", "h200", "--tp", "8"),
    ("cost", "-m", "qwen2.5-7b", "-g", "l40s", "--price", "1"),
]


@pytest.mark.parametrize("args", DEFAULTS, ids=lambda a: a[0])
def test_auto_formats_are_the_old_bf16_defaults(args: tuple[str, ...]) -> None:
    assert _json(*args) == _json(*args, "--weights", "bf16", "--kv-dtype", "bf16")
    assert _json(*args) == _json(*args, "--dtype", "bfloat16", "--kv-cache-dtype", "auto")


def test_kv_cache_dtype_auto_is_16_bit_under_quantized_weights() -> None:
    code, out, _ = _run("memory", "-m", "llama-3.1-8b", "-g", "h100", "--dtype", "int4",
                        "--max-model-len", "8192", "--json")
    data = json.loads(out)
    assert code == 0 and data["weight_format"] == "int4-g128" and data["kv_format"] == "bf16"
    assert data["resolved"]["kv_cache_dtype"] == {
        "requested": "auto", "name": "bf16", "how": "auto", "renamed": True,
        "note": "the 16-bit activation type; quantized weights leave it as it is",
    }


STAND_IN = ("model: llama-3.1-70b → meta-llama/Llama-3.3-70B-Instruct (same architecture and "
            "size as Llama 3.1 70B; the catalog carries 3.3)")
H100 = "gpu: h100 → H100-SXM (the SXM part; the PCIe card is H100-PCIe)"
WITH_MODEL = [
    ("kv", "-m", "llama-3.1-70b"),
    ("memory", "-m", "llama-3.1-70b", "-g", "h100", "-tp", "4", "--max-model-len", "8192"),
    ("roofline", "-m", "llama-3.1-70b", "-g", "h100", "-tp", "4"),
    ("claim", "20", "-m", "llama-3.1-70b", "-g", "h100", "-tp", "4"),
    ("allreduce", "-g", "h100", "-m", "llama-3.1-70b"),
    ("cost", "-m", "llama-3.1-70b", "-g", "h100", "--price", "2", "-tp", "4"),
]


@pytest.mark.parametrize("args", WITH_MODEL, ids=lambda a: a[0])
def test_every_output_says_what_the_names_resolved_to(args: tuple[str, ...]) -> None:
    code, out, _ = _run(*args)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == STAND_IN
    if "-g" in args:
        assert lines[1] == H100
    code, out, _ = _run(*args, "--json")
    resolved = json.loads(out)["resolved"]
    assert resolved["model"] == {
        "requested": "llama-3.1-70b", "name": "meta-llama/Llama-3.3-70B-Instruct",
        "how": "stand-in", "renamed": True,
        "note": "same architecture and size as Llama 3.1 70B; the catalog carries 3.3",
    }
    if "-g" in args:
        assert resolved["gpu"]["name"] == "H100-SXM" and resolved["gpu"]["renamed"]


def test_exact_names_are_stated_without_an_arrow() -> None:
    code, out, _ = _run("roofline", "-m", "meta-llama/Llama-3.1-8B", "-g", "H100 SXM")
    assert code == 0
    assert out.splitlines()[:2] == ["model: meta-llama/Llama-3.1-8B", "gpu: H100-SXM"]
    code, out, _ = _run("roofline", "-m", "meta-llama/Llama-3.1-8B", "-g", "H100 SXM", "--json")
    resolved = json.loads(out)["resolved"]
    assert resolved["model"]["how"] == "exact" and not resolved["model"]["renamed"]
    assert resolved["gpu"] == {"requested": "H100 SXM", "name": "H100-SXM", "how": "exact",
                               "note": None, "renamed": False}


def test_other_stand_ins_say_why() -> None:
    _, out, _ = _run("kv", "-m", "Llama-3-8B")
    assert out.splitlines()[0].startswith(
        "model: Llama-3-8B → meta-llama/Llama-3.1-8B (Llama 3 has the shapes of Llama 3.1")
    _, out, _ = _run("kv", "-m", "deepseek-ai/DeepSeek-R1")
    assert "→ deepseek-ai/DeepSeek-V3 (DeepSeek-R1 is trained from DeepSeek-V3-Base" in out
    _, out, _ = _run("kv", "-m", "Qwen/Qwen2.5-7B-Instruct")
    assert "→ Qwen/Qwen2.5-7B (the instruct fine-tune has the base model's shapes" in out


def test_a_config_file_is_named_as_given(tmp_path: Path) -> None:
    from infbench.specs.model_catalog import CATALOG

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CATALOG["meta-llama/Llama-3.1-8B"][0]))
    code, out, _ = _run("kv", "-m", str(path))
    assert code == 0 and out.splitlines()[0] == f"model: {path} (config.json given)"


def test_catalogs_list_the_names_they_answer_to() -> None:
    code, out, _ = _run("models", "--json")
    entry = next(m for m in json.loads(out) if m["name"] == "meta-llama/Llama-3.3-70B-Instruct")
    notes = {a["name"]: a["note"] for a in entry["aliases"]}
    assert code == 0 and notes["llama-3.1-70b"].startswith("same architecture and size")
    code, out, _ = _run("models")
    assert code == 0 and "llama-3.1-70b" in out and "the catalog carries 3.3" in out
    code, out, _ = _run("gpus", "--json")
    h100 = next(g for g in json.loads(out) if g["name"] == "H100-SXM")
    assert code == 0 and h100["alias_notes"]["h100"].startswith("the SXM part")
    assert h100["memory_bandwidth"] == 3.35e12


BAD = [
    (("kv", "-m", "llama-3.1-8b", "--block-size", "0"), "block_size must be a positive integer"),
    (("kv", "-m", "llama-3.1-8b", "--kv-cache-dtype", "fp7"), "unknown format 'fp7'"),
    (("kv", "-m", "llama-3.1-8b", "-tp", "abc"), "'-tp'"),
    (("kv", "-m", "x:100:y[bold]z"), "unknown model 'x:100:y[bold]z'"),
    (("memory", "-m", "llama-3.1-8b", "-g", "h100", "--gpu-memory-utilization", "1.5"),
     "gpu_memory_utilization must be in (0, 1], got 1.5"),
    (("memory", "-m", "llama-3.1-8b", "-g", "h100", "--dtype", "float32"),
     "unknown format 'float32'"),
    (("memory", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "0"),
     "max_model_len must be a positive integer"),
    (("memory", "-m", "llama-3.1-8b", "-g", "h100", "--context", "0"),
     "context must be a positive integer, got 0"),
    (("roofline", "-m", "llama-3.1-8b", "-g", "h100", "--max-num-batched-tokens", "0"),
     "chunk_tokens must be a positive integer"),
    (("roofline", "-m", "llama-3.1-8b", "-g", "h100", "--flops-fraction", "2"),
     "flops_fraction must be in (0, 1]"),
    (("claim", "0", "-m", "llama-3.1-8b", "-g", "h100"), "claimed tokens/s per user must be > 0"),
    (("claim", "10", "-m", "llama-3.1-70b", "-g", "h100", "-tp", "3"),
     "tp=3 does not divide num_attention_heads=64"),
    (("allreduce", "-g", "h100", "-tp", "1"), "n (ranks) must be an integer >= 2"),
    (("allreduce", "-g", "h100", "-s", "-1"), "size must be >= 0 bytes"),
    (("allreduce", "-g", "[red]x"), "unknown gpu '[red]x'"),
    (("cost", "-m", "llama-3.1-8b", "-g", "h100", "--price", "0"), "price per GPU-hour"),
    (("cost", "-m", "llama-3.1-8b", "-g", "h100", "--price", "1", "--input-tps", "-5"),
     "measured input tokens/s must be > 0"),
    (("gpus", "--vendor", "nvidia"), "No such option: --vendor"),
    (("models", "--family", "llama"), "No such option: --family"),
    (("no-such-verb",), "No such command"),
    (("memory", "-m", "llama-3.1-8b"), "Missing option '--gpu'"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=lambda a: " ".join(a[:2]))
def test_bad_input_is_one_line_with_exit_2(args: tuple[str, ...], needle: str) -> None:
    code, out, err = _run(*args)
    assert code == 2, err
    assert needle in err, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""


def _help_examples(verb: str | None) -> list[str]:
    code, out, _ = _run(*([verb] if verb else []), "--help")
    assert code == 0
    return [ln.strip() for ln in out.splitlines() if ln.strip().startswith("infbench plan ")]


def _readme_examples() -> list[str]:
    """The `infbench plan` examples of the docs' calculators section (the planning guide)."""
    blocks = bash_blocks(section("Calculators: `infbench plan`"))
    return [ln.strip() for b in blocks for ln in b.splitlines()
            if ln.strip().startswith("infbench plan ")]


def _expected_code(line: str) -> tuple[list[str], int]:
    command, _, comment = line.partition("#")
    match = re.search(r"exits (\d+)", comment)
    return shlex.split(command)[2:], int(match.group(1)) if match else 0


def test_every_verb_help_gives_an_example() -> None:
    for verb in (None, *VERBS):
        assert _help_examples(verb), f"plan {verb or ''} --help has no example"
    assert len(_readme_examples()) >= 2


@pytest.mark.parametrize("line", [*(e for v in (None, *VERBS) for e in _help_examples(v)),
                                  *_readme_examples()])
def test_help_and_readme_examples_run(line: str) -> None:
    args, expected = _expected_code(line)
    code, out, err = _run(*args)
    assert code == expected, f"{line}: exit {code}\n{err}"
    assert out and "Traceback" not in err
