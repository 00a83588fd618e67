"""The workload fingerprint (schedule + lengths + order, never the text) and the check of a
run's prefix-cache share against what its workload repeats."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pytest

from infbench.loadgen.cache_share import EXCESS_WARN, prefix_cache_check
from infbench.loadgen.fingerprint import (
    IntendedRequest,
    intended_requests,
    run_fingerprint,
    store_fingerprint,
    workload_fingerprint,
)
from infbench.store import BatchWriter, create_run
from tests.support.stores import new_store

R = IntendedRequest


def _reqs(n: int = 6) -> list[IntendedRequest]:
    return [R((i, 0), i * 125_000_000, 100 + i, 20 + i, "synthetic") for i in range(n)]


def test_fingerprint_changes_with_each_ingredient() -> None:
    base = _reqs()
    fp = workload_fingerprint(base)
    assert fp.startswith("wf1-") and len(fp) == 36
    assert workload_fingerprint(list(reversed(base))) == fp  # keyed, not by arrival in the list
    variants = [
        [replace(base[0], offset_ns=base[0].offset_ns + 1), *base[1:]],  # one ns later
        [replace(base[0], input_tokens=101), *base[1:]],
        [replace(base[0], max_tokens=21), *base[1:]],
        [replace(base[0], label="group-0"), *base[1:]],
        [replace(base[0], input_tokens=None), *base[1:]],
        [replace(r, key=(r.key[0], 1)) for r in base],  # turn numbers
        base[:-1],  # one request fewer
        # the same values sent in another order
        [replace(r, key=(len(base) - 1 - r.key[0], 0)) for r in base],
    ]
    fps = {workload_fingerprint(v) for v in variants}
    assert fp not in fps and len(fps) == len(variants)


def test_closed_loop_hashes_lengths_and_concurrency() -> None:
    closed = [replace(r, offset_ns=None) for r in _reqs()]
    c4, c8 = (workload_fingerprint(closed, closed_loop_concurrency=c) for c in (4, 8))
    assert c4 != c8 != workload_fingerprint(closed)
    with pytest.raises(ValueError, match="concurrency"):
        workload_fingerprint(closed, closed_loop_concurrency=0)
    with pytest.raises(ValueError, match="key"):
        workload_fingerprint([*closed, closed[0]])
    assert workload_fingerprint([]) != workload_fingerprint([], closed_loop_concurrency=1)


def _store(tmp: Path, config: dict[str, Any], rows: list[dict[str, Any]], run_id: str = "r",
           name: str = "s") -> duckdb.DuckDBPyConnection:
    """A store `tmp/NAME.duckdb` with one run of these request rows (unset columns: defaults)."""
    con = new_store(tmp / f"{name}.duckdb")
    create_run(con, run_id=run_id, config=config, target_url="u", model="m", endpoint="completions",
               t0_monotonic_ns=0)
    cols = ("request_idx", "label", "phase", "conversation_id", "turn", "intended_send_ns", "send_ns",
            "target_input_tokens", "max_tokens", "error_class", "prompt_tokens", "cached_tokens",
            "output_tokens")
    defaults = {"phase": "measure", "conversation_id": None, "turn": None, "error_class": None,
                "label": "synthetic", "target_input_tokens": None, "cached_tokens": None,
                "prompt_tokens": None, "output_tokens": 4, "max_tokens": 4}
    w = BatchWriter(con, run_id)
    full = [{**defaults, "intended_send_ns": 0, "send_ns": 0, **r} for r in rows]
    w.put("requests", {c: [r[c] for r in full] for c in cols})
    w.close()
    return con


def _closed(c: int) -> dict[str, Any]:
    return {"arrivals": {"kind": "closed", "concurrency": c}}


OPEN = {"arrivals": {"kind": "poisson", "concurrency": 0}}


def test_store_fingerprint_of_open_closed_and_multiturn_runs(tmp_path: Path) -> None:
    rows = [{"request_idx": i, "intended_send_ns": 1000 * i, "send_ns": 1000 * i + 7 * i,
             "target_input_tokens": 50 + i, "max_tokens": 9} for i in range(5)]
    con = _store(tmp_path, OPEN, rows)
    fp = store_fingerprint(con, "r")
    assert con.execute("SELECT workload_fingerprint FROM runs").fetchone() == (fp,)
    assert fp == workload_fingerprint([R((i, 0), 1000 * i, 50 + i, 9, "synthetic") for i in range(5)])
    con.close()

    # Closed loop: the stored intended send is the actual send, which differs run to run.
    a = _store(tmp_path, _closed(2), rows, name="a")
    b = _store(tmp_path, _closed(2), [{**r, "intended_send_ns": r["intended_send_ns"] * 3 + 11} for r in rows],
               name="b")
    assert run_fingerprint(a, "r") == run_fingerprint(b, "r") != fp
    assert all(r.offset_ns is None for r in intended_requests(a, "r"))

    # Conversations: keyed (conversation, turn) whatever order the turns were sent in; later
    # turns have no schedule of their own.
    conv = [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2)]
    mt = [{"request_idx": i, "conversation_id": c, "turn": t, "label": f"turn-{t}",
           "intended_send_ns": 10**6 * c if t == 0 else 10**8 + i, "target_input_tokens": 10 * (t + 1)}
          for i, (c, t) in enumerate(conv)]
    shuffled = [{**r, "request_idx": j, "intended_send_ns": r["intended_send_ns"] + (0 if r["turn"] == 0 else 5)}
                for j, r in enumerate([mt[0], mt[1], mt[3], mt[2], mt[5], mt[4]])]
    c = _store(tmp_path, OPEN, mt, name="c")
    d = _store(tmp_path, OPEN, shuffled, name="d")
    assert [r.key for r in intended_requests(c, "r")] == sorted(conv)
    assert run_fingerprint(c, "r") == run_fingerprint(d, "r")


def test_fingerprint_of_a_missing_run_is_an_error(tmp_path: Path) -> None:
    con = _store(tmp_path, OPEN, [])
    with pytest.raises(ValueError, match="no such run"):
        run_fingerprint(con, "nope")
    assert run_fingerprint(con, "r") == workload_fingerprint([])


def _cfg(workload: dict[str, Any], overhead: float = 1.0, reuse: bool = False) -> dict[str, Any]:
    return {**OPEN, "workload": workload, "token_model": {"overhead": overhead},
            "prompts": {"reuse": reuse, "salt": None if reuse else "00ff"}}


SYN = {"workload": "synthetic"}


@pytest.mark.parametrize(("cached", "reuse", "warns"),
                         [(0, False, False), (1, False, False), (97, False, True), (97, True, True)])
def test_cache_share_of_a_random_workload(tmp_path: Path, cached: int, reuse: bool, warns: bool) -> None:
    rows = [{"request_idx": i, "prompt_tokens": 100, "cached_tokens": cached} for i in range(10)]
    figures, warning = prefix_cache_check(_store(tmp_path, _cfg(SYN, reuse=reuse), rows), "r")
    assert figures is not None
    assert figures["cached_share"] == pytest.approx(cached / 100)
    assert figures["implied_share"] == pytest.approx(0.01)  # the BOS every prompt starts with
    assert (warning is not None) == warns
    if warns:
        assert "97%" in warning and ("--reuse-prompts" in warning) == reuse


def test_template_overhead_is_expected_not_warned(tmp_path: Path) -> None:
    # A chat template of 42 tokens, 32 of them cached in whole blocks, on 60-token prompts.
    rows = [{"request_idx": i, "prompt_tokens": 60, "cached_tokens": 32} for i in range(8)]
    _, warning = prefix_cache_check(_store(tmp_path, _cfg(SYN, overhead=42.0), rows), "r")
    assert warning is None
    _, warning = prefix_cache_check(_store(tmp_path, _cfg(SYN, overhead=1.0), rows, name="n"), "r")
    assert warning is not None


def test_cache_share_of_shared_prefix_groups(tmp_path: Path) -> None:
    wl = {"workload": "prefix", "prefix_tokens": 80}
    labels = ["group-0", "group-1", "group-0", "group-0", "group-1", "group-1"]
    rows = [{"request_idx": i, "label": g, "prompt_tokens": 100, "cached_tokens": 0 if i < 2 else 80}
            for i, g in enumerate(labels)]
    figures, warning = prefix_cache_check(_store(tmp_path, _cfg(wl), rows), "r")
    assert figures is not None and warning is None
    assert figures["implied_share"] == pytest.approx((2 * 1 + 4 * 81) / 600)
    # Every request cached, the first of each group too: the groups were warm before the run.
    warm = [{**r, "cached_tokens": 80} for r in rows]
    figures, warning = prefix_cache_check(_store(tmp_path, _cfg(wl), warm, name="w"), "r")
    assert figures is not None and figures["cached_share"] - figures["implied_share"] > EXCESS_WARN
    assert warning is not None


def test_cache_share_of_conversations(tmp_path: Path) -> None:
    conv = [(0, 0, 40, 0), (0, 1, 90, 40), (1, 0, 40, 0), (0, 2, 150, 90), (1, 1, 95, 40)]
    rows = [{"request_idx": i, "conversation_id": c, "turn": t, "label": f"turn-{t}", "prompt_tokens": p,
             "cached_tokens": k, "output_tokens": 10} for i, (c, t, p, k) in enumerate(conv)]
    figures, warning = prefix_cache_check(_store(tmp_path, _cfg({"workload": "multiturn"}), rows), "r")
    assert warning is None and figures is not None
    assert figures["implied_share"] == pytest.approx((1 + 51 + 1 + 101 + 51) / 415)  # history + reply + BOS


def test_cache_share_of_a_mooncake_trace(tmp_path: Path) -> None:
    trace = tmp_path / "m.jsonl"
    ids = [[1, 2], [1, 2, 3], [4], [1, 5]]
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 512 * len(h), "output_length": 2,
                                         "hash_ids": h}) + "\n" for i, h in enumerate(ids)))
    wl = {"workload": "trace", "trace": str(trace), "time_scale": 1.0, "trace_start_s": 0.0, "trace_end_s": None}
    rows = [{"request_idx": i, "label": "trace", "prompt_tokens": 512 * len(h),
             "cached_tokens": [0, 1024, 0, 512][i]} for i, h in enumerate(ids)]
    con = _store(tmp_path, _cfg(wl), rows)
    figures, warning = prefix_cache_check(con, "r")
    assert warning is None and figures is not None
    assert figures["implied_share"] == pytest.approx((1 + 1025 + 1 + 513) / (512 * 8))
    trace.unlink()  # the file moved away: the implied share is unknown, and nothing is claimed
    figures, warning = prefix_cache_check(con, "r")
    assert figures is not None and figures["implied_share"] is None and warning is None


def test_no_cache_figures_without_reports(tmp_path: Path) -> None:
    rows = [{"request_idx": 0, "prompt_tokens": 100}, {"request_idx": 1, "prompt_tokens": None},
            {"request_idx": 2, "prompt_tokens": 100, "cached_tokens": 100, "error_class": "http_500"},
            {"request_idx": 3, "prompt_tokens": 100, "cached_tokens": 100, "phase": "warmup"}]
    assert prefix_cache_check(_store(tmp_path, _cfg(SYN), rows), "r") == (None, None)
