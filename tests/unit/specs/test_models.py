"""Model catalog and config.json parser: parameter counts against published figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infbench.specs import SpecError, get_model
from infbench.specs.model_catalog import CATALOG


def test_llama_31_8b_has_8_03_billion_parameters() -> None:
    # Meta Llama 3.1 model card (huggingface.co/meta-llama/Llama-3.1-8B): "8.03B params".
    assert get_model("meta-llama/Llama-3.1-8B").params.total == pytest.approx(8.03e9, rel=1e-3)


def test_llama_70b_and_405b_totals() -> None:
    # Hugging Face model pages list 70.6B (Llama-3.1/3.3-70B) and 406B (Llama-3.1-405B).
    assert get_model("llama-3.1-70b").params.total == pytest.approx(70.6e9, rel=2e-3)
    assert get_model("llama-3.1-405b").params.total == pytest.approx(406e9, rel=2e-3)


def test_mixtral_total_and_active_parameters() -> None:
    # Mistral AI, "Mixtral of experts" (arXiv:2401.04088): 46.7B total, 12.9B active per token.
    p = get_model("mixtral-8x7b").params
    assert p.total == pytest.approx(46.7e9, rel=2e-3)
    assert p.active == pytest.approx(12.9e9, rel=5e-3)


def test_deepseek_v3_total_and_active_parameters() -> None:
    # DeepSeek-V3 Technical Report (arXiv:2412.19437): 671B total, 37B activated per token
    # (the 14B multi-token-prediction module is not part of the 671B).
    p = get_model("deepseek-ai/DeepSeek-V3").params
    assert p.total == pytest.approx(671e9, rel=2e-3)
    assert p.active == pytest.approx(37e9, rel=0.02)


def test_qwen25_counts_biases_and_tied_embeddings() -> None:
    # Qwen2.5 model cards: 7B = 7.61B total / 6.53B non-embedding; 3B = 3.09B / 2.77B
    # (3B ties its embeddings, 7B does not; both carry q/k/v biases).
    q7, q3 = get_model("Qwen/Qwen2.5-7B"), get_model("qwen2.5-3b")
    assert q7.qkv_bias and not q7.o_bias and not q7.tie_word_embeddings
    assert q7.params.total == pytest.approx(7.61e9, rel=1e-3)
    assert q7.params.non_embedding == pytest.approx(6.53e9, rel=1e-3)
    assert q3.tie_word_embeddings and q3.params.lm_head == 0
    assert q3.params.total == pytest.approx(3.09e9, abs=0.005e9)  # published to 2 decimals
    assert q3.params.non_embedding == pytest.approx(2.77e9, abs=0.005e9)
    assert get_model("qwen2.5-72b").params.total == pytest.approx(72.7e9, rel=1e-3)


def test_gemma2_alternates_sliding_and_global_layers() -> None:
    # Gemma 2 report (arXiv:2408.00118): local 4096-token sliding window every other layer;
    # 9B model card: 9.24B parameters.
    m = get_model("google/gemma-2-9b")
    assert m.layer_windows[:4] == (4096, None, 4096, None)
    assert sum(w is not None for w in m.layer_windows) == 21
    assert m.params.total == pytest.approx(9.24e9, rel=1e-3)


def test_mistral_sliding_window_applies_to_every_layer() -> None:
    m = get_model("mistral-7b")
    assert set(m.layer_windows) == {4096}


def test_aliases_are_case_insensitive_and_accept_instruct_names() -> None:
    a = get_model("LLAMA-3.1-8B")
    assert get_model("meta-llama/Llama-3.1-8B-Instruct") is a
    assert get_model("llama-3.3-70b") is get_model("Llama-3.1-70B")


def test_every_catalog_entry_parses_and_derives_positive_counts() -> None:
    for name in CATALOG:
        p = get_model(name).params
        assert 0 < p.active <= p.total


def test_local_config_json_uses_the_same_parser(tmp_path: Path) -> None:
    cfg = dict(CATALOG["meta-llama/Llama-3.1-8B"][0])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    from_file = get_model(str(path))
    assert from_file.params.total == get_model("llama-3.1-8b").params.total
    assert get_model(str(tmp_path)).params.total == from_file.params.total  # a model directory


def test_missing_field_is_named(tmp_path: Path) -> None:
    cfg = dict(CATALOG["meta-llama/Llama-3.1-8B"][0])
    del cfg["hidden_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match="missing field 'hidden_size'"):
        get_model(str(path))


def test_bad_field_value_is_named(tmp_path: Path) -> None:
    cfg = {**CATALOG["meta-llama/Llama-3.1-8B"][0], "num_key_value_heads": -8}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match="'num_key_value_heads' must be a positive integer"):
        get_model(str(path))


def test_kv_heads_must_divide_heads(tmp_path: Path) -> None:
    cfg = {**CATALOG["meta-llama/Llama-3.1-8B"][0], "num_key_value_heads": 7}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match="num_key_value_heads"):
        get_model(str(path))


def test_invalid_json_and_missing_file_are_one_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{ not json")
    with pytest.raises(SpecError, match="not valid JSON") as exc:
        get_model(str(path))
    assert "\n" not in str(exc.value)
    with pytest.raises(SpecError, match="cannot read"):
        get_model(str(tmp_path / "absent.json"))


def test_unknown_model_name() -> None:
    with pytest.raises(SpecError, match="unknown model 'gpt-17'"):
        get_model("gpt-17")
