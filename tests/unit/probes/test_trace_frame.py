"""`TraceFrame` (a trace analysed in memory) computes what the store path computes.

The store path (import + `Timeline`'s SQL) is checked against HTA in test_trace_analysis.py;
here both paths run on the same input and must give the same rows: on the real fixtures, on
generated traces that vary what the definitions branch on (profiler-step cuts, sub-us
timestamps, missing or shared correlations, streams written as text, several ranks,
overlapping kernel types, zero-length kernels), with either of the frame's two readers.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import probes.traces.kineto_columns as kc
from probes.traces import TraceError, import_trace
from probes.traces.analysis import Timeline
from probes.traces.frame import TraceFrame
from tests.support.stores import new_store
from tests.unit.probes.traces_support import KINETO, nsys_sqlite, same_as_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    con = new_store(tmp_path_factory.mktemp("frame") / "s.duckdb")
    yield con
    con.close()


@pytest.mark.parametrize("reader", ["orjson", "duckdb"])
@pytest.mark.parametrize("trace", list(KINETO))
def test_fixtures_match_the_store_path(store, trace: str, reader: str, monkeypatch) -> None:
    if reader == "duckdb":
        monkeypatch.setattr(kc, "LARGE_BYTES", 0)
    frame = TraceFrame.read(KINETO[trace])
    same_as_store(frame, store, import_trace(store, KINETO[trace]).trace_id)


def test_both_readers_give_the_same_columns(monkeypatch) -> None:
    for path in (KINETO["nccl2"], KINETO["alexnet"]):
        a = kc.read_rank(path, None)
        monkeypatch.setattr(kc, "LARGE_BYTES", 0)
        b = kc.read_rank(path, None)
        monkeypatch.undo()
        assert (a.rank, a.round_to_us) == (b.rank, b.round_to_us)
        for col in ("event_id", "start_ns", "end_ns", "correlation", "stream"):
            assert np.array_equal(getattr(a, col), getattr(b, col)), col
        assert list(a.cat) == list(b.cat) and list(a.name) == list(b.name)


# ---- generated traces -----------------------------------------------------------------------

_NAMES = {
    "kernel": ["void gemm_kernel<128>", "elementwise_kernel", "ncclKernel_AllReduce_RING_LL_Sum_float",
               "ncclDevKernel_AllGather_RING_LL", "Stream Wait Event"],
    "gpu_memcpy": ["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoD (Device -> Device)"],
    "gpu_memset": ["Memset (Device)"],
    "cuda_sync": ["Stream Sync", "Context Sync"],
}


@st.composite
def kineto_rank(draw, rank: int, fractional: bool, steps: int, base: int) -> dict:
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}}]

    def t(x: float) -> str:
        # the literal, written unquoted by _dump: an epoch-us base with three decimals has
        # more digits than a float holds
        whole = base + int(x)
        return f"{whole}.{draw(st.integers(0, 999)):03d}" if fractional else str(whole)

    def d(x: float) -> str:
        return f"{int(x)}.{draw(st.integers(0, 999)):03d}" if fractional else str(int(x))

    span = draw(st.integers(200, 4000))
    step_starts = [1000 + k * span // max(steps, 1) for k in range(steps)]
    for k, at in enumerate(step_starts):
        cat = draw(st.sampled_from(["cpu_op", "user_annotation"]))
        ev.append({"ph": "X", "cat": cat, "name": f"ProfilerStep#{k + 3}", "pid": 1, "tid": 1,
                   "ts": t(at), "dur": d(span / max(steps, 1) - 1)})
    corr = 100
    for _ in range(draw(st.integers(1, 40))):
        cat = draw(st.sampled_from(list(_NAMES)))
        name = draw(st.sampled_from(_NAMES[cat]))
        how = draw(st.sampled_from(["launched", "launched", "twice", "at a step", "no call",
                                    "no correlation"]))
        lead = draw(st.integers(1, 50))
        if how == "at a step" and step_starts:  # the launch starts exactly when a step does
            start = draw(st.sampled_from(step_starts)) + lead
        else:
            start = 1000 + draw(st.integers(0, span))
        dur = draw(st.integers(0, 60))
        stream = draw(st.sampled_from([7, 13, "13", 20]))
        corr += 1
        args: dict = {"stream": stream, "device": 0}
        if how != "no correlation":
            args["correlation"] = corr
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                   "ts": t(start), "dur": d(dur), "args": args})
        if how in ("launched", "twice", "at a step"):
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": t(start - lead), "dur": d(draw(st.integers(1, 10))),
                       "args": {"correlation": corr, "cbid": 211}})
            if how == "twice":  # a second call with the same correlation, later: not the launch
                ev.append({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 1,
                           "tid": 1, "ts": t(start - lead + draw(st.integers(1, 40))), "dur": "1",
                           "args": {"correlation": corr}})
        ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "ts": t(start), "pid": 0,
                   "tid": stream, "bp": "e"})
    ev.append({"ph": "i", "cat": "cpu_instant_event", "name": "mark", "ts": t(1500), "s": "t"})
    draw(st.randoms()).shuffle(ev)
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2},
            "traceEvents": ev}


@st.composite
def trace_dirs(draw) -> list[dict]:
    fractional = draw(st.booleans())
    steps = draw(st.sampled_from([0, 1, 2, 3]))
    ranks = draw(st.integers(1, 2))
    base = draw(st.sampled_from([0, 4458676388068, 1695835542481000]))
    return [draw(kineto_rank(r, fractional, steps, base)) for r in range(ranks)]


def _dump(doc: dict) -> str:
    """JSON with every ts/dur literal unquoted (a few left as strings: Kineto versions differ)."""
    text = json.dumps(doc)
    return re.sub(r'"(ts|dur)": "([0-9.]+)"',
                  lambda m: m.group(0) if m.group(2).endswith("7") else f'"{m.group(1)}": {m.group(2)}',
                  text)


# Found by this test in a CI-like round: a rank with a stream sync and CPU ops but no kernel
# (the idle analyses zipped one group boundary too many).
NO_KERNEL = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}},
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": "1000.000", "dur": "99.000"},
    {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": "1100.000", "dur": "99.000"},
    {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": "1000.000", "dur": "0.000",
     "args": {"stream": 7, "device": 0, "correlation": 101}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": "999.000",
     "dur": "1.000", "args": {"correlation": 101, "cbid": 211}},
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 101, "ts": "1000.000", "pid": 0, "tid": 7, "bp": "e"},
    {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "ts": "1500.000", "s": "t"}]}

# Found in a quick-loop run: the only kernel starts after the last ProfilerStep (cut, as HTA
# cuts) and the steps are user annotations, not CPU ops: no GPU events and no CPU ops. The
# frame once suggested `--only cpu_steps`, which would find nothing; both paths now refuse alike.
CUT_KERNEL_NO_OPS = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": "1000.000",
     "dur": "99.000"},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": "1100.000",
     "dur": "99.000"},
    {"ph": "X", "cat": "kernel", "name": "void gemm_kernel<128>", "pid": 0, "tid": 7, "ts": "1101.000",
     "dur": "0.000", "args": {"stream": 7, "device": 0, "correlation": 101}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": "1100.000",
     "dur": "1.000", "args": {"correlation": 101, "cbid": 211}},
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 101, "ts": "1101.000", "pid": 0, "tid": 7, "bp": "e"},
    {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "ts": "1500.000", "s": "t"}]}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                               HealthCheck.too_slow])
@given(docs=trace_dirs())
@example(docs=[NO_KERNEL])
@example(docs=[CUT_KERNEL_NO_OPS])
def test_generated_traces_match_the_store_path(store, tmp_path_factory, docs: list[dict]) -> None:
    d = tmp_path_factory.mktemp("gen")
    for doc in docs:
        rank = doc["distributedInfo"]["rank"]
        with gzip.open(d / f"rank-{rank}.json.gz", "wt") as f:
            f.write(_dump(doc))
    src = d if len(docs) > 1 else d / "rank-0.json.gz"
    try:
        frame = TraceFrame.read(src)
    except TraceError as exc:
        assert "no GPU events" in str(exc)
        trace_id = import_trace(store, src).trace_id
        if "or CPU ops" in str(exc):  # nothing for cpu_steps either: the store path refuses too
            with pytest.raises(TraceError, match="no GPU events or CPU ops"):
                Timeline(store, trace_id)
            return
        with Timeline(store, trace_id) as tl:
            assert tl.events == 0
        return
    same_as_store(frame, store, import_trace(store, src).trace_id)


# ---- exactness and bad input ----------------------------------------------------------------

@pytest.mark.parametrize("base", [1695835542481129, 9500000000000])
def test_epoch_microsecond_timestamps_with_decimals_stay_exact(store, tmp_path: Path, base: int) -> None:
    # 1.7e15 us with three decimals has 19 significant digits, 9.5e12 us 16 where a double's
    # spacing is 2 ns: a float cannot hold them, so both readers go back to the literals.
    # (.124 and .001 are among the decimals a double at 9.5e12 turns into .123 and .002)
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "ts": f"{base}.124", "dur": 5.5,
           "args": {"stream": 7, "correlation": 1}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": f"{base - 3}.001",
           "dur": 1, "args": {"correlation": 1}}]
    text = json.dumps({"traceEvents": ev}).replace('"' + f"{base}.124" + '"', f"{base}.124") \
        .replace('"' + f"{base - 3}.001" + '"', f"{base - 3}.001")
    p = tmp_path / "epoch.json"
    p.write_text(text)
    r = kc.read_rank(p, None)
    assert sorted(r.start_ns.tolist()) == [(base - 3) * 1000 + 1, base * 1000 + 124]
    assert r.round_to_us
    t = import_trace(store, p)
    assert store.execute(
        "SELECT start_ns FROM trace_gpu_ops WHERE trace_id = $t UNION ALL "
        "SELECT start_ns FROM trace_api_calls WHERE trace_id = $t", {"t": t.trace_id},
    ).fetchall() == [(base * 1000 + 124,), ((base - 3) * 1000 + 1,)]
    same_as_store(TraceFrame.read(p), store, t.trace_id)


@pytest.mark.parametrize(("content", "message"), [
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel"', "malformed JSON"),
    (b'{"schemaVersion": 1}', "no traceEvents array"),
    (b"[1, 2", "malformed JSON"),
    (b'"just a string"', "neither a PyTorch profiler"),
])
def test_bad_files_get_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=message) as exc:
        TraceFrame.read(p)
    assert "\n" not in str(exc.value) and str(p) in str(exc.value)


def test_truncated_gzip_nsys_cpu_only_and_duplicate_ranks(tmp_path: Path) -> None:
    data = KINETO["alexnet"].read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="corrupt or truncated gzip"):
        TraceFrame.read(cut)
    with pytest.raises(TraceError, match="Nsight Systems export"):
        TraceFrame.read(nsys_sqlite(tmp_path))
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "engine_step#1", "ts": 1, "dur": 9}]}))
    with pytest.raises(TraceError, match="no GPU events"):
        TraceFrame.read(cpu)
    two = tmp_path / "two"
    two.mkdir()
    for i in range(2):
        (two / f"rank-{i}.json.gz").write_bytes(data)  # both say distributedInfo.rank 0
    with pytest.raises(TraceError, match="two files claim rank 0"):
        TraceFrame.read(two)


def test_pandas_api(store) -> None:
    frame = TraceFrame.read(KINETO["sampled128"])
    df = frame.temporal_breakdown()
    assert list(df.columns)[:2] == ["rank", "idle_time_us"] and len(df) == 1
    assert frame.kernel_type_breakdown(all_ranks=False)["time_us"].sum() == pytest.approx(278680)
    assert frame.events == 602 and frame.ranks == [0]
    assert set(frame.idle_time_breakdown()["idle_category"]) <= {"host_wait", "kernel_wait", "other"}
    assert len(frame.kernel_breakdown(num_kernels=3)) < len(frame.kernel_breakdown())
    with pytest.raises(TraceError, match="unknown analysis"):
        frame.query("steps")


@pytest.mark.parametrize("fractional", [False, True])
def test_a_launch_at_the_last_step_start_is_cut(store, tmp_path: Path, fractional: bool) -> None:
    # HTA keeps CPU events that start before the last profiler step starts: a launch at that
    # very instant is cut with the step, and so is an uncorrelated GPU op starting then.
    f = ".250" if fractional else ""

    def x(name: str, cat: str, ts: int, dur: int, **args: int) -> str:
        return json.dumps({"ph": "X", "cat": cat, "name": name, "ts": 0, "dur": dur,
                           "args": args}).replace('"ts": 0', f'"ts": {ts}{f}')

    ev = [x("ProfilerStep#1", "cpu_op", 100, 50), x("ProfilerStep#2", "cpu_op", 200, 50),
          x("cudaLaunchKernel", "cuda_runtime", 150, 2, correlation=1),
          x("gemm", "kernel", 160, 5, stream=7, correlation=1),
          x("cudaLaunchKernel", "cuda_runtime", 200, 2, correlation=2),
          x("gemm", "kernel", 210, 5, stream=7, correlation=2),
          x("copy_kernel", "kernel", 199, 5, stream=7), x("copy_kernel", "kernel", 200, 5, stream=7)]
    p = tmp_path / "cut.json"
    p.write_text('{"traceEvents": [' + ", ".join(ev) + "]}")
    frame = TraceFrame.read(p)
    assert frame.events == 2  # the kernel launched at 150 and the op starting at 199
    same_as_store(frame, store, import_trace(store, p).trace_id)


def test_rank_from_the_file_name_in_a_directory(store, tmp_path: Path) -> None:
    # No distributedInfo: in a directory the rank comes from the file's name, as on import.
    doc = json.loads(gzip.decompress(KINETO["alexnet"].read_bytes()))
    del doc["distributedInfo"]
    d = tmp_path / "one"
    d.mkdir()
    (d / "worker_rank-3.json").write_text(json.dumps(doc))
    frame = TraceFrame.read(d)
    assert frame.ranks == [3]
    same_as_store(frame, store, import_trace(store, d).trace_id)
