"""Startup memory budget: vLLM's order of terms, the documented failure, priced fixes."""

from __future__ import annotations

import pytest

from infbench.specs import SpecError, get_gpu, get_model
from infbench.specs.gpus import GIB
from infbench.specs.memory import plan_memory


def test_budget_terms_add_up_in_vllm_order() -> None:
    p = plan_memory(get_model("llama-3.1-8b"), get_gpu("h100"), max_model_len=8192)
    assert p.budget_bytes == pytest.approx(80 * GIB * 0.9)
    assert p.kv_pool_bytes == pytest.approx(
        p.budget_bytes
        - p.weights_bytes
        - p.activation_bytes
        - p.non_torch_bytes
        - p.cuda_graph_bytes
    )
    assert p.num_blocks == int(p.kv_pool_bytes // (16 * 131_072))
    assert p.kv_tokens == p.num_blocks * 16
    assert p.fits and p.failing_term is None and p.error is None and p.fixes == ()
    assert p.max_concurrency(8192) == p.num_blocks // 512


def test_70b_bf16_on_two_h100_at_128k_runs_out_of_kv_cache() -> None:
    # The documented startup failure (vLLM issue reports of Llama-3-70B on 2 x 80 GB at a
    # 128k max_model_len): ~65.7 GiB of weights per GPU leave a few GiB of KV, while one
    # 131072-token sequence needs 131072 x 163,840 B = 20 GiB per GPU.
    p = plan_memory(get_model("llama-3.1-70b"), get_gpu("h100"), tp=2, max_model_len=131072)
    assert p.weights_bytes / GIB == pytest.approx(65.7, abs=0.1)
    assert p.needed_bytes == 131072 * 163_840
    assert not p.fits and p.failing_term == "kv_cache"
    assert p.error.startswith(
        "ValueError: To serve at least one request with the models's max seq len (131072)"
    )
    assert f"estimated maximum model length is {p.max_model_len_that_fits}" in p.error
    assert 0 < p.max_model_len_that_fits < 131072
    fixes = {f.change.split("=")[0]: f for f in p.fixes}
    assert fixes["tp"].fits and fixes["tp"].settings == {"tp": 4}
    assert fixes["max_model_len"].settings == {"max_model_len": p.max_model_len_that_fits}
    assert not fixes["gpu_memory_utilization"].fits  # even 0.99 leaves it short
    assert any(f.fits and "weight_format" in f.settings for f in p.fixes)
    for f in p.fixes:
        if f.fits:
            assert plan_memory(
                get_model("llama-3.1-70b"),
                get_gpu("h100"),
                **{"tp": 2, "max_model_len": 131072, **f.settings},
            ).fits


def test_weights_that_overrun_the_budget_are_the_failing_term() -> None:
    p = plan_memory(get_model("llama-3.1-70b"), get_gpu("h100"), tp=1, max_model_len=8192)
    assert p.failing_term == "weights" and p.num_blocks == 0
    assert "out of memory" in p.error


def test_utilization_fix_is_the_smallest_setting_that_fits() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("l4")  # 24 GiB: 8B bf16 barely fits
    p = plan_memory(m, g, max_model_len=32768, gpu_memory_utilization=0.8)
    assert not p.fits
    util = next(f for f in p.fixes if f.change.startswith("gpu_memory_utilization") and f.fits)
    u = util.settings["gpu_memory_utilization"]
    assert plan_memory(m, g, max_model_len=32768, gpu_memory_utilization=u).fits
    assert not plan_memory(
        m, g, max_model_len=32768, gpu_memory_utilization=round(u - 0.01, 2)
    ).fits


def test_fp8_weights_and_kv_shrink_their_terms() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    base = plan_memory(m, g, max_model_len=8192)
    q = plan_memory(m, g, max_model_len=8192, weight_format="fp8", kv_format="fp8")
    assert q.kv_bytes_per_token == base.kv_bytes_per_token / 2
    assert q.weights_bytes < 0.6 * base.weights_bytes  # embeddings stay bf16
    assert q.kv_tokens > 2 * base.kv_tokens


def test_enforce_eager_drops_cuda_graphs() -> None:
    p = plan_memory(
        get_model("llama-3.1-8b"), get_gpu("h100"), max_model_len=8192, enforce_eager=True
    )
    assert p.cuda_graph_bytes == 0


def test_bad_arguments_name_the_field() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    with pytest.raises(SpecError, match="gpu_memory_utilization"):
        plan_memory(m, g, gpu_memory_utilization=1.5)
    with pytest.raises(SpecError, match="max_model_len"):
        plan_memory(m, g, max_model_len=0)
    with pytest.raises(SpecError, match="tp=5"):
        plan_memory(m, g, tp=5)
