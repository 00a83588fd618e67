"""What a diff compares: a setting one side does not show is a coverage gap (listed apart,
never ranked, never filled from the catalog), and a value printed at start-up against the
one the engine resolved later says which is final instead of ranking. Keys vary across the
cases so that no rule can be a special case of one key."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from infbench.config.capture import capture_text
from infbench.config.diff import MISSING, DiffResult, diff_sides, side_from, side_of
from infbench.config.impact import Workload
from infbench.config.model import Setting
from infbench.config.render import to_json, to_markdown, to_text

V = "0.32.0"


def side(values: dict[str, Any], origin: str = "printed", kind: str = "vllm_log", version: str = V,
         engine: str = "vllm", **origins: str):  # type: ignore[no-untyped-def]
    settings = {k: Setting(k, v, origins.get(k, origin), k, None) for k, v in values.items()}
    return side_of(engine, version, settings, kind)


def diff(a, b) -> DiffResult:  # type: ignore[no-untyped-def]
    return diff_sides(a, b, Workload(), ({"label": "A-side"}, {"label": "B-side"}))


def ranked_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if re.match(r"^\s*\d+\. ", x)]


# (only A shows X, only B shows Y, both show Z with different values); every one-sided value
# differs from the catalog's default for the other side, so filling it in would rank it.
CASES = [
    (("max_num_seqs", 64), ("block_size", 128), ("kv_cache_dtype", "auto", "fp8")),
    (("tensor_parallel_size", 2), ("gpu_memory_utilization", 0.92), ("max_num_batched_tokens", 2048, 8192)),
    (("cudagraph_mode", "NONE"), ("enable_prefix_caching", False), ("max_model_len", 4096, 8192)),
    (("async_scheduling", False), ("max_num_seqs", 48), ("dtype", "bfloat16", "float16")),
]


@pytest.mark.parametrize(("x", "y", "z"), CASES)
def test_a_setting_one_side_shows_is_a_gap_never_ranked(x, y, z) -> None:  # type: ignore[no-untyped-def]
    common = {"model": "m", "enable_chunked_prefill": True}
    a = side({**common, x[0]: x[1], z[0]: z[1]})
    b = side({**common, y[0]: y[1], z[0]: z[2]})
    r = diff(a, b)
    assert [d.key for d in r.differences] == [z[0]]
    assert (r.differences[0].a, r.differences[0].b) == (z[1], z[2])
    assert [(g.key, g.side, g.value) for g in r.gaps] == sorted([(x[0], "a", x[1]), (y[0], "b", y[1])])
    assert r.same == 2
    doc = json.loads(to_json(r))
    assert [d["key"] for d in doc["differences"]] == [z[0]]
    assert [g["key"] for g in doc["only_a"]] == [x[0]] and [g["key"] for g in doc["only_b"]] == [y[0]]
    assert MISSING not in json.dumps(doc)
    text = to_text(r)
    assert [line.split(":")[0].split(". ")[1] for line in ranked_lines(text)] == [z[0]]
    assert "1 settings differ, 2 agree; shown by only one side: 2 (A 1, B 1)" in text
    gaps = text[text.index("shown by only one side (coverage gaps"):]
    assert gaps.index("only A (A-side): 1") < gaps.index(f"    {x[0]} ") < gaps.index("only B (B-side): 1") \
        < gaps.index(f"    {y[0]} ")
    md = to_markdown(r)
    assert md.count("\n| ") == 3 and f"| `{z[0]}` |" in md
    assert f"- only A: `{x[0]}`" in md and f"- only B: `{y[0]}`" in md


@pytest.mark.parametrize(("key", "shown", "catalog"), [
    ("cudagraph_mode", "NONE", "FULL_AND_PIECEWISE"),
    ("block_size", 128, "16"),
    ("async_scheduling", False, "True"),
])
def test_the_catalog_default_is_context_for_the_side_that_did_not_show_it(key, shown, catalog) -> None:  # type: ignore[no-untyped-def]
    live = side({"enable_prefix_caching": True}, origin="resolved", kind="live_endpoint")
    log = side({"enable_prefix_caching": True, key: shown})
    for r, name in ((diff(log, live), "a"), (diff(live, log), "b")):
        assert r.differences == [] and r.same == 1
        (gap,) = r.gaps
        assert (gap.key, gap.side, gap.value) == (key, name, shown)
        assert gap.context == f"catalog default {catalog} for vllm {V} (not observed)"
        assert f"{key} {json.dumps(shown) if not isinstance(shown, str) else shown} " in to_text(r)


def test_a_printed_none_is_a_placeholder_not_a_value_and_none_is_filled_in() -> None:
    # max_num_batched_tokens=None: "decided at start-up"; the catalog knows a default, so the
    # None is not what ran. quantization=None is a value ("none"): the catalog has no default.
    a = side({"engine_v1": True, "max_num_batched_tokens": None, "quantization": None}, version="0.10.2")
    b = side({"engine_v1": True, "max_num_batched_tokens": 8192, "quantization": "fp8"}, version="0.11.0")
    r = diff(a, b)
    assert [d.key for d in r.differences] == ["quantization"]
    (gap,) = r.gaps
    assert (gap.key, gap.side, gap.value) == ("max_num_batched_tokens", "b", 8192)
    assert gap.context is not None and gap.context.startswith("printed None (decided at start-up")
    assert "(not observed)" in gap.context


def test_defaults_that_moved_but_neither_side_shows_are_context_only() -> None:
    a = side({"max_num_seqs": 64}, version="0.13.0")
    b = side({"max_num_seqs": 64}, version="0.14.0")
    r = diff(a, b)
    assert r.differences == [] and r.gaps == [] and r.same == 1
    moved = {m["key"]: (m["a"], m["b"]) for m in r.unobserved_moves}
    assert moved == {"async_scheduling": ("False", "True")}
    assert "(not observed): async_scheduling False -> True" in to_text(r)


# A start-up print against the value the same engine version resolved later: the evidence
# that the print predates the resolution, per case, on the resolving side B.
FINAL = [
    ("block_size", 16, 128, {"_block_size_resolved": True}),
    ("gpu_memory_utilization", 0.9, 0.92, {"user_specified_gpu_memory_utilization": False}),
    ("cudagraph_max_capture_size", None, 512, {}),  # printed None: left to start-up
    ("kv_cache_dtype", "auto", "fp8", {"_cache_dtype_resolved": True}),  # flagged by its raw name
]


def _final_sides(key: str, printed: Any, final: Any, flags: dict[str, Any], *, version: str = V,
                 a_origin: str = "printed"):  # type: ignore[no-untyped-def]
    a = side({"model": "m", key: printed}, **{key: a_origin})
    raw = "cache_dtype" if key == "kv_cache_dtype" else key
    settings = {k: Setting(k, v, "resolved", k, None) for k, v in {"model": "m", **flags}.items()}
    settings[key] = Setting(key, final, "resolved", f"vllm:cache_config_info.{raw}", None)
    return a, side_of("vllm", version, settings, "live_endpoint")


@pytest.mark.parametrize(("key", "printed", "final", "flags"), FINAL)
def test_printed_then_resolved_says_which_is_final_and_is_not_ranked(key, printed, final, flags) -> None:  # type: ignore[no-untyped-def]
    a, b = _final_sides(key, printed, final, flags)
    for r, p, f in ((diff(a, b), "a", "b"), (diff(b, a), "b", "a")):
        assert r.differences == [] and r.gaps == []
        (fin,) = r.finality
        assert (fin.key, fin.printed_side, fin.printed, fin.final_side, fin.final) == (key, p, printed, f, final)
        text = to_text(r)
        assert "nothing ranked" in text and "printed at start-up, resolved later" in text
        shown = final if isinstance(final, str) else json.dumps(final)
        assert f"final: {shown} ({f.upper()})" in text
        assert json.loads(to_json(r))["printed_then_resolved"][0]["final"] == final


@pytest.mark.parametrize(("key", "printed", "final", "flags"), FINAL)
def test_without_evidence_of_resolution_a_printed_value_that_differs_is_a_change(key, printed, final, flags) -> None:  # type: ignore[no-untyped-def]
    # Another engine version may simply have another value; so may a server started with the
    # flag (the user set it, so no flag saying "the engine chose it" applies); and without
    # the flag nothing says the print predates the resolution.
    other_version = _final_sides(key, printed, final, flags, version="0.31.0")
    if printed is None:  # a placeholder another version printed: no value to compare with
        r = diff(*other_version)
        assert r.differences == [] and r.finality == [] and [(g.key, g.side) for g in r.gaps] == [(key, "b")]
        return
    for a, b in (other_version, _final_sides(key, printed, final, flags, a_origin="set"),
                 _final_sides(key, printed, final, {})):
        r = diff(a, b)
        assert [d.key for d in r.differences] == [key] and r.finality == []


def test_one_capture_keeps_its_print_and_its_later_resolution() -> None:
    # vLLM 0.32.0's non-default args line, started with --block-size 16, and 0.11.1rc6's line
    # for a hybrid model whose attention block must hold a mamba page (fixtures' formats).
    text = ("(APIServer pid=1) INFO 12-02 00:25:23 [api_utils.py:286] non-default args: "
            "{'model': 'm', 'block_size': 16, 'max_num_seqs': 32}\n"
            "(EngineCore pid=2) INFO 12-02 00:25:40 [config.py:320] Setting attention block size to "
            "528 tokens to ensure that attention page size is >= mamba page size.\n")
    cap = capture_text(text, "hybrid.log")
    s, p = cap.settings["block_size"], cap.printed["block_size"]
    assert (s.value, s.origin, s.line) == (528, "resolved", 2) and (p.value, p.origin, p.line) == (16, "set", 1)
    assert "max_num_seqs" not in cap.printed  # nothing later said otherwise
    same = diff(side_from(cap), side_from(cap))
    assert same.differences == [] and same.finality == []
    assert same.superseded["a"] == [{"key": "block_size", "printed": 16, "printed_origin": "set",
                                     "printed_line": 1, "final": 528}]
    assert "A printed then resolved: block_size 16 (set, line 1) -> 528 (final)" in to_text(same)
    # Another start of the same version that only printed 16: this capture shows 16 became 528.
    other = capture_text(text.splitlines()[0] + "\n", "other.log")
    other.version = cap.version = V
    r = diff(side_from(other), side_from(cap))
    assert r.differences == [] and r.finality[0].final == 528
    assert "B printed 16 too, then resolved it to 528" in r.finality[0].evidence
