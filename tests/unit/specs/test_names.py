"""Names resolved to catalog entries (with the reason when the entry is another checkpoint),
and vLLM's `auto` formats."""

from __future__ import annotations

import pytest

from infbench.specs import SpecError, get_gpu, get_model
from infbench.specs.formats import serving_formats
from infbench.specs.gpus import GPUS, resolve_gpu
from infbench.specs.model_catalog import ALIAS_NOTES, CATALOG
from infbench.specs.models import resolve_model


@pytest.mark.parametrize(
    ("name", "entry", "how"),
    [
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B", "exact"),
        ("META-LLAMA/llama_3.1_8b", "meta-llama/Llama-3.1-8B", "exact"),
        ("Llama-3.1-8B", "meta-llama/Llama-3.1-8B", "short name"),
        ("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct", "alias"),
        ("llama-3.1-70b", "meta-llama/Llama-3.3-70B-Instruct", "stand-in"),
        ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", "stand-in"),
        ("deepseek-r1", "deepseek-ai/DeepSeek-V3", "stand-in"),
        ("Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen2.5-72B", "stand-in"),
        ("Mistral-7B-Instruct", "mistralai/Mistral-7B-v0.1", "stand-in"),
        ("unsloth/Llama-3.1-8B", "meta-llama/Llama-3.1-8B", "stand-in"),
    ],
)
def test_model_names_resolve_and_say_how(name: str, entry: str, how: str) -> None:
    spec, r = resolve_model(name)
    assert (spec.name, r.name, r.how, r.requested) == (entry, entry, how, name)
    assert (r.note is not None) == (how == "stand-in")
    assert r.renamed == (how != "exact")
    assert get_model(name) is spec


def test_every_note_names_a_listed_alias() -> None:
    listed = {a for _, aliases in CATALOG.values() for a in aliases}
    assert set(ALIAS_NOTES) <= listed


def test_the_70b_stand_in_says_why() -> None:
    _, r = resolve_model("llama-3.1-70b")
    assert r.note == "same architecture and size as Llama 3.1 70B; the catalog carries 3.3"


def test_unknown_model_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="unknown model 'llama-9'"):
        resolve_model("llama-9")


def test_gpu_names_resolve_and_say_which_part() -> None:
    gpu, r = resolve_gpu("h100")
    assert gpu.name == "H100-SXM" and r.how == "alias" and r.note and "SXM" in r.note
    gpu, r = resolve_gpu("H100 PCIe")
    assert gpu.name == "H100-PCIe" and r.how == "exact" and r.note is None and not r.renamed
    assert all(resolve_gpu(g.name)[0] is g and get_gpu(g.name) is g for g in GPUS)
    with pytest.raises(SpecError, match="unknown gpu 'tpu'"):
        resolve_gpu("tpu")


@pytest.mark.parametrize(
    ("dtype", "kv", "checkpoint", "weights_name", "kv_name"),
    [
        ("auto", "auto", "bfloat16", "bf16", "bf16"),
        ("auto", "auto", "float16", "fp16", "fp16"),
        ("auto", "auto", "float32", "bf16", "bf16"),  # served in 16 bits
        ("auto", "auto", None, "bf16", "bf16"),
        ("half", "auto", "bfloat16", "fp16", "fp16"),
        ("fp8", "auto", "bfloat16", "fp8", "bf16"),  # vLLM: auto KV is the activation type
        ("int4", "auto", "float16", "int4-g128", "fp16"),
        ("bfloat16", "fp8_e4m3", None, "bf16", "fp8"),
    ],
)
def test_serving_formats_resolve_auto_as_vllm(
    dtype: str, kv: str, checkpoint: str | None, weights_name: str, kv_name: str
) -> None:
    weights, kv_format = serving_formats(dtype, kv, checkpoint)
    assert (weights.name, kv_format.name) == (weights_name, kv_name)


def test_serving_formats_reject_what_they_do_not_model() -> None:
    with pytest.raises(SpecError, match="unknown format 'float32'"):
        serving_formats("float32", "auto", None)
