"""The repr reader: every construct engines print, and the errors that name where it broke."""

from __future__ import annotations

import pytest

from infbench.config.pyrepr import Call, EnumValue, ReprError, parse_kv_list, parse_value


def test_python_and_json_values() -> None:
    v = parse_value("{'a': [1, -2.5, 1e3], \"b\": (True, None), 'c': {}, 'd': 'it\\'s', 'e': null}")
    assert v == {"a": [1, -2.5, 1000.0], "b": (True, None), "c": {}, "d": "it's", "e": None}


def test_enums_with_int_tuple_and_string_values() -> None:
    v = parse_value("[<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, <CompilationMode.NONE: 0>, "
                    "<DynamicShapesType.BACKED: 'backed'>]")
    assert v == [EnumValue("CUDAGraphMode.FULL_AND_PIECEWISE", (2, 1)),
                 EnumValue("CompilationMode.NONE", 0), EnumValue("DynamicShapesType.BACKED", "backed")]
    assert v[0].member == "FULL_AND_PIECEWISE"


def test_nested_calls_with_positional_and_keyword_arguments() -> None:
    v = parse_value("KernelConfig(ir=IrOpPriorityConfig(rms_norm=['vllm_c', 'native']), n=3)")
    assert v == Call("KernelConfig", (), {"ir": Call("IrOpPriorityConfig", (), {"rms_norm": ["vllm_c", "native"]}), "n": 3})
    assert parse_value("PosixPath('/tmp/x')") == Call("PosixPath", ("/tmp/x",), {})


def test_versions_and_paths_stay_text() -> None:
    assert parse_value("12.2.140") == "12.2.140"
    assert parse_value("torch.bfloat16") == "torch.bfloat16"
    assert parse_value("cuda:1") == "cuda:1"


def test_kv_list_keeps_unquoted_values_as_text() -> None:
    got = parse_kv_list("model='m', tokenizer_mode=auto, quantization=compressed-tensors, "
                        "served_model_name=org/Model-1.5B, device_config=cuda:1, "
                        "decoding_config=DecodingConfig(backend='auto'), compilation_config={\"level\":0}")
    assert [(k, v) for k, v, _ in got] == [
        ("model", "m"), ("tokenizer_mode", "auto"), ("quantization", "compressed-tensors"),
        ("served_model_name", "org/Model-1.5B"), ("device_config", "cuda:1"),
        ("decoding_config", Call("DecodingConfig", (), {"backend": "auto"})),
        ("compilation_config", {"level": 0})]


def test_kv_list_accepts_the_v0_closing_paren() -> None:
    assert [k for k, _, _ in parse_kv_list("a=1, seed=0)")] == ["a", "seed"]


@pytest.mark.parametrize("text, truncated", [
    ("{'a': [1, 2", True), ("{'a': 'unterminated", True), ("{'a': 1]", False),
    ("[<Mode.X 1>]", False)])
def test_errors_say_whether_the_text_was_cut(text: str, truncated: bool) -> None:
    with pytest.raises(ReprError) as err:
        parse_value(text)
    assert err.value.truncated is truncated


def test_kv_list_cut_inside_a_bracket_is_an_error_with_a_column() -> None:
    with pytest.raises(ReprError) as err:
        parse_kv_list("a=1, compilation_config={'sizes': [1, 2, 4,")
    assert err.value.truncated and "column 35" in err.value.in_columns(0)  # the "["


def test_nothing_is_evaluated() -> None:
    # What eval would run is data here, or an error: a call is only ever a name and arguments.
    assert parse_value("__import__('os')") == Call("__import__", ("os",), {})
    with pytest.raises(ReprError):
        parse_value("__import__('os').system('true')")
