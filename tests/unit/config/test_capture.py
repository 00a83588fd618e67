"""Capture from real engine text (tests/fixtures/config_logs, sources in its README):
three vLLM log formats (V0 0.4.1, V1 JSON 0.10.2, V1 repr-with-enums 0.11/0.22), two
collect-env layouts, two SGLang versions, a TensorRT-LLM option file; damaged copies fail
with one line naming the line and store nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.config.capture import capture_source, detect
from infbench.config.model import MASK, CaptureError
from infbench.config.store import load_config, save_config
from tests.support.stores import new_store

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "config_logs"


def cap(name: str):  # type: ignore[no-untyped-def]
    return capture_source(str(FIX / name))


def test_vllm_v0_041_namespace_and_engine_line() -> None:
    c = cap("vllm_0.4.1_v0.log")
    assert (c.engine, c.version, c.source_kind) == ("vllm", "0.4.1", "vllm_log")
    v = c.values()
    assert v["engine_v1"] is False
    assert v["max_model_len"] == 8192  # the engine's max_seq_len, over the CLI's None
    assert v["dtype"] == "bfloat16" and v["max_num_seqs"] == 256 and v["block_size"] == 16
    assert v["enable_chunked_prefill"] is False and v["enable_prefix_caching"] is False
    assert v["decoding_config.guided_decoding_backend"] == "outlines"
    assert c.settings["max_model_len"].raw_key == "max_seq_len" and c.settings["max_model_len"].line == 3


def test_vllm_v1_0102_json_compilation_config_and_single_value_lines() -> None:
    c = cap("vllm_0.10.2_v1.log")
    v = c.values()
    assert c.version == "0.10.2" and v["engine_v1"] is True
    assert v["cudagraph_mode"] == "NONE" and v["compilation_mode"] == "NONE"
    assert v["cudagraph_capture_sizes"] == [] and v["enforce_eager"] is True
    assert v["max_num_batched_tokens"] == 2048 and v["num_gpu_blocks"] == 302267
    assert v["kv_cache_tokens"] == 4836272 and v["enable_chunked_prefill"] is True
    assert c.settings["gpu_memory_utilization"].origin == "set"  # from non-default args
    assert c.settings["enable_prefix_caching"].origin == "printed"  # the engine config line: a start-up print
    assert "model_tag" not in v and v["served_model_name"] == "TinyLlama/TinyLlama-1.1B-Chat-v1.0"


def test_vllm_v1_0111_enums_in_args_and_config() -> None:
    c = cap("vllm_0.11.1rc6_v1.log")
    v = c.values()
    assert v["cudagraph_mode"] == "PIECEWISE" and c.settings["cudagraph_mode"].origin == "set"
    assert v["compilation_mode"] == "VLLM_COMPILE"
    sizes = v["cudagraph_capture_sizes"]
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 512 and len(sizes) == 51
    assert v["cudagraph_max_capture_size"] == 512 and v["block_size"] == 528


def test_vllm_v1_0221_nested_calls_and_async_scheduling() -> None:
    c = cap("vllm_0.22.1rc1_v1.log")
    v = c.values()
    assert c.version == "0.22.1rc1.dev357+g74b5964f0"
    assert v["async_scheduling"] is True and v["max_num_seqs"] == 1
    assert v["kernel_config.ir_op_priority.rms_norm"] == ["vllm_c", "native"]
    assert v["compilation_config.dynamic_shapes_config.type"] == "BACKED"
    assert v["hf_overrides.diffusion_entropy_bound"] == 0.1
    assert c.settings["tensor_parallel_size"].origin == "set"


def test_terminal_wrapped_log_reads_as_the_original() -> None:
    a, b = cap("vllm_0.4.1_v0.log"), cap("vllm_wrapped.log")
    assert a.values() == b.values()
    assert b.settings["max_model_len"].line == 10  # the first source line of the record


def test_collect_env_both_layouts() -> None:
    old, new = cap("vllm_collect_env_0.6.3.txt"), cap("vllm_collect_env_0.23.1.txt")
    assert old.source_kind == new.source_kind == "vllm_collect_env"
    assert old.version == "0.6.3.post2.dev308+gb489fc3c"
    assert new.version == "0.23.1rc1.dev998+g88e5e2c57"
    assert old.values()["gpu_models"] == ["NVIDIA H100 80GB HBM3"] and old.values()["gpu_count"] == 8
    assert old.values()["pip.torch"] == "2.5.1" and new.values()["torch_version"] == "2.11.0+gitd0c8b1f"
    assert new.values()["env.TORCHINDUCTOR_COMPILE_THREADS"] == "1"


def test_sglang_server_args_two_versions() -> None:
    a, b = cap("sglang_2025-01.log"), cap("sglang_2026-02.log")
    assert a.engine == b.engine == "sglang"
    va, vb = a.values(), b.values()
    assert va["scheduling_policy"] == "lpm" and vb["scheduling_policy"] == "fcfs"
    assert va["mem_fraction_static"] == 0.88 and vb["mem_fraction_static"] == 0.835
    assert va["cudagraph_max_capture_size"] == 160 and vb["cudagraph_max_capture_size"] == 4
    assert va["tensor_parallel_size"] == 1 and va["async_scheduling"] is True  # overlap on
    assert va["enable_prefix_caching"] is True and va["chunked_prefill_size"] == 8192
    assert vb["cudagraph_capture_sizes"][:3] == [1, 2, 4]


def test_trtllm_option_file() -> None:
    c = cap("trtllm_deepseek_r1.yml")
    assert (c.engine, c.source_kind) == ("trtllm", "trtllm_yaml")
    assert c.values() == {"cudagraph_padding": True, "cudagraph_max_capture_size": 512,
                          "enable_attention_dp": True, "kv_cache_dtype": "fp8",
                          "kv_cache_config.free_gpu_memory_fraction": 0.8, "stream_interval": 10,
                          "moe_config.backend": "DEEPGEMM"}
    assert all(s.origin == "set" for s in c.settings.values())
    assert c.settings["stream_interval"].line == 8


def test_secrets_are_masked_before_storing(tmp_path: Path) -> None:
    c = cap("vllm_secrets.log")
    assert c.values()["api_key"] == MASK and c.values()["hf_token"] == MASK
    con = new_store(tmp_path / "s.duckdb")
    cid = save_config(con, c, label="s")
    dump = str(con.execute("SELECT * FROM config_values").fetchall())
    dump += str(con.execute("SELECT * FROM configs").fetchall())
    assert "sk-live" not in dump and "hf_AbCd" not in dump
    assert load_config(con, "s").values()["api_key"] == MASK and load_config(con, cid).label == "s"


@pytest.mark.parametrize("name, line, words", [
    ("vllm_truncated.log", 10, "cut off"),
    ("vllm_garbled.log", 3, "garbled"),
    ("sglang_truncated.log", 1, "cut off"),
    ("trtllm_garbled.yml", 3, "never closed"),
])
def test_damaged_sources_fail_naming_the_line(name: str, line: int, words: str) -> None:
    with pytest.raises(CaptureError) as err:
        cap(name)
    msg = str(err.value)
    assert msg.startswith(str(FIX / name)) and f"line {line}:" in msg and words in msg
    assert "nothing was stored" in msg and "\n" not in msg


def test_unknown_text_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("hello\nworld\n")
    assert detect(p.read_text()) is None
    with pytest.raises(CaptureError, match="not a vLLM log"):
        capture_source(str(p))
    with pytest.raises(CaptureError, match="no such file"):
        capture_source(str(tmp_path / "missing.log"))


def test_the_reference_engine_logs_its_config_the_way_vllm_does() -> None:
    from infbench.config.capture import capture_text
    from reference_engine.config import EngineConfig

    cfg = EngineConfig.with_defaults("ref-2", max_num_seqs=64, stream_interval=2)
    c = capture_text(f"INFO: {cfg.vllm_config_line()}\n", "engine.log")
    assert (c.engine, c.version) == ("reference", "ref-2")
    v = c.values()
    assert v["max_num_seqs"] == 64 and v["stream_interval"] == 2 and v["async_scheduling"] is True
    assert v["cudagraph_mode"] == "FULL_AND_PIECEWISE" and v["cudagraph_max_capture_size"] == 128
    assert v["cudagraph_capture_sizes"][-1] == 128 and v["max_model_len"] == 8192
