"""infbench's trace loading + timeline analysis against Holistic Trace Analysis, side by side.

For each trace (the four real fixtures in tests/fixtures/traces, and a 1M-event trace made
by replicating the NCCL fixture 25 times with shifted times, ids and profiler steps), each
tool runs in a fresh process: load the trace, then the same four analyses (temporal
breakdown, idle time per stream with interval stats, kernel breakdown, comm/comp overlap).
Measured: wall time of the load and of the analyses, peak resident memory of the process,
and the numbers themselves, which must agree (percentages within 0.1 points, times 0.1%).

infbench runs two ways, each in its own fresh process:
- in memory, like HTA: `TraceFrame.read(path)` then its analyses (numpy); HTA's load is
  `TraceAnalysis(trace_dir)`. This is the like-for-like comparison.
- through the store: `import_trace` into a DuckDB file (what `infbench trace import` does:
  the trace is kept and linked to runs) then `Timeline`'s SQL analyses.

HTA runs in its own environment (it pins jupyterlab and plotly, which infbench does not
want): `python -m venv /tmp/venv-hta && /tmp/venv-hta/bin/pip install --no-deps
holistictraceanalysis==0.5.0 && /tmp/venv-hta/bin/pip install pandas numpy plotly networkx
psutil pyyaml pydot`, then `python benchmarks/bench_traces.py --hta-python
/tmp/venv-hta/bin/python` (about 10 minutes on 2 CPUs, most of it HTA on the 1M trace).
Results go to benchmarks/results/traces.md.

Whole process (`--whole-only` runs just this part and rewrites just its section): what a
user waits for, start-up and imports included. `infbench trace analyze DIR` (the console
script, tables to a pipe) against a fresh `python -c` that imports hta, loads DIR with
TraceAnalysis and runs the same analyses; wall and CPU time of each process from outside.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "traces"
RESULTS = Path(__file__).resolve().parent / "results" / "traces.md"
TRACES = {
    "sampled128": [FIX / "hta_sampled_rank-0_a100_128ranks.json.gz"],
    "nccl2": [FIX / "hta_nccl_2ranks_a100.json.gz"],
    "alexnet": [FIX / "hta_alexnet_a100.json.gz"],
    "filter2rank": sorted((FIX / "sampled_2ranks").glob("*.json.gz")),
    # a third party's epoch-microsecond trace with sub-microsecond digits (HTA's ns_resolution)
    "ns_resolution": [FIX / "hta_ns_resolution_resnet_v100.json.gz"],
}
WHOLE_HEADING = "## Whole process: `infbench trace analyze DIR` vs HTA"

# Every child reports its process's peak resident memory (VmHWM) the same way.
PEAK_MB = r"""
def peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""

HTA_CHILD = r"""
import json, resource, sys, time, warnings, logging
{peak_mb}warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
ranks = sorted(a.t.traces)
tb = a.get_temporal_breakdown(visualize=False)
idle, stats = a.get_idle_time_breakdown(ranks=ranks, visualize=False, show_idle_interval_stats=True)
kt, kd = a.get_gpu_kernel_breakdown(visualize=False)
ov = a.get_comm_comp_overlap(visualize=False)
t3 = time.perf_counter()
out = {"import_s": t1 - t0, "load_s": t2 - t1, "analyses_s": t3 - t2,
       "peak_mb": peak_mb(),
       "temporal": tb.to_dict("records"), "overlap": ov.to_dict("records"),
       "idle": idle.to_dict("records"), "kernel_types": kt.to_dict("records")}
print(json.dumps(out, default=float))
"""

INFBENCH_CHILD = r"""
import json, resource, sys, time
{peak_mb}t0 = time.perf_counter()
from infbench.store import open_store
from probes.traces import import_trace
from probes.traces.analysis import Timeline
t1 = time.perf_counter()
con = open_store(sys.argv[2])
t_open = time.perf_counter()
t = import_trace(con, sys.argv[1])
t2 = time.perf_counter()
res, sqls = {}, []
with Timeline(con, t.trace_id) as tl:
    for name in ("temporal", "idle", "idle_stats", "kernel_types", "kernels", "overlap"):
        cols, rows, sql = tl.query(name)
        res[name] = [dict(zip(cols, r)) for r in rows]
        sqls.append(sql)
    t3 = time.perf_counter()
    # After the timed part: what planning alone costs (EXPLAIN binds and optimises, runs
    # nothing), and a transaction that writes one row - the fixed costs no trace size removes.
    for sql in sqls:
        con.execute("EXPLAIN " + sql).fetchall()
    t4 = time.perf_counter()
con.execute("CREATE TEMP TABLE _one (x INTEGER)")
t5 = time.perf_counter()
con.execute("BEGIN TRANSACTION"); con.execute("INSERT INTO _one VALUES (1)"); con.execute("COMMIT")
t6 = time.perf_counter()
out = {"import_s": t1 - t0, "load_s": t2 - t1, "analyses_s": t3 - t2, "open_s": t_open - t1,
       "plan_s": t4 - t3, "txn_s": t6 - t5,
       "peak_mb": peak_mb(), "events": t.events, **res}
print(json.dumps(out, default=float))
"""


FRAME_CHILD = r"""
import json, resource, sys, time
{peak_mb}t0 = time.perf_counter()
from probes.traces.frame import TraceFrame
t1 = time.perf_counter()
tf = TraceFrame.read(sys.argv[1])
t2 = time.perf_counter()
res = {}
for name in ("temporal", "idle", "idle_stats", "kernel_types", "kernels", "overlap"):
    cols, rows = tf.query(name)
    res[name] = [dict(zip(cols, r)) for r in rows]
t3 = time.perf_counter()
out = {"import_s": t1 - t0, "load_s": t2 - t1, "analyses_s": t3 - t2, "peak_mb": peak_mb(), **res}
print(json.dumps(out, default=float))
"""


HTA_CHILD, INFBENCH_CHILD, FRAME_CHILD = (
    c.replace("{peak_mb}", PEAK_MB) for c in (HTA_CHILD, INFBENCH_CHILD, FRAME_CHILD))


def replicate(src: Path, dest: Path, copies: int) -> int:
    """A bigger trace: `copies` of src's events, each shifted past the previous one in time,
    with correlation ids, External ids, flow ids and ProfilerStep numbers made unique."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), int | float)]
    span = max(ts) - min(ts) + 1000.0
    corr = max(int((e.get("args") or {}).get("correlation", 0)) for e in events) + 1
    ext = max(int((e.get("args") or {}).get("External id", 0)) for e in events) + 1
    out = []
    for k in range(copies):
        for e in events:
            e2 = dict(e)
            if isinstance(e2.get("ts"), int | float):
                e2["ts"] = round(e2["ts"] + k * span, 3)
            args = e2.get("args")
            if isinstance(args, dict) and k:
                args = dict(args)
                if isinstance(args.get("correlation"), int) and args["correlation"] > 0:
                    args["correlation"] += k * corr
                if isinstance(args.get("External id"), int):
                    args["External id"] += k * ext
                e2["args"] = args
            if "id" in e2 and isinstance(e2["id"], int) and k:
                e2["id"] += k * corr
            name = e2.get("name")
            if k and isinstance(name, str) and name.startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{int(name[13:]) + k * 100}"
            out.append(e2)
    doc["traceEvents"] = out
    with gzip.open(dest, "wt", compresslevel=1) as f:
        json.dump(doc, f, separators=(",", ":"))
    return len(out)


def run(argv: list[str], timeout: float) -> dict:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _new_store(path: Path) -> None:
    # The store exists before the import, as it does for a user (it holds their runs); its
    # creation (schema migrations, ~0.1 s) is not part of importing a trace.
    from infbench.store import open_store

    open_store(path).close()


def agree(hta: dict, mine: dict) -> tuple[bool, str]:
    bad = []
    for h in hta["temporal"]:
        m = next(x for x in mine["temporal"] if x["rank"] == h["rank"])
        for k in ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"):
            if abs(m[k] - h[k]) > 0.1:
                bad.append(f"rank {h['rank']} {k} {m[k]} vs {h[k]}")
        if abs(m["kernel_time_us"] - h["kernel_time(us)"]) > 1e-3 * h["kernel_time(us)"]:
            bad.append(f"rank {h['rank']} kernel_time {m['kernel_time_us']} vs {h['kernel_time(us)']}")
    for h in hta["overlap"]:
        m = next(x for x in mine["overlap"] if x["rank"] == h["rank"])
        hv, mv = h["comp_comm_overlap_pctg"], m["comp_comm_overlap_pctg"]
        if not (hv != hv and mv is None) and (mv is None or abs(mv - hv) > 0.1):
            bad.append(f"rank {h['rank']} overlap {mv} vs {hv}")
    idle = {(x["rank"], x["stream"], x["idle_category"]): x["idle_time"] for x in mine["idle"]}
    for h in hta["idle"]:
        m = idle.get((h.get("rank", 0), h["stream"], h["idle_category"]))
        if m is None or abs(m - h["idle_time"]) > 1e-3 * max(h["idle_time"], 1.0):
            bad.append(f"idle {h['stream']} {h['idle_category']} {m} vs {h['idle_time']}")
    kt = {x["kernel_type"]: x["sum_us"] for x in mine["kernel_types"]}
    for h in hta["kernel_types"]:
        if h["sum"] > 0 and abs(kt.get(h["kernel_type"], -1) - h["sum"]) > 1e-3 * h["sum"]:
            bad.append(f"kernel type {h['kernel_type']} {kt.get(h['kernel_type'])} vs {h['sum']}")
    return not bad, "; ".join(bad[:3])


def _trace_dir(work: Path, name: str, files: list[Path]) -> Path:
    d = work / re.sub(r"\W+", "_", name)
    d.mkdir(exist_ok=True)
    for f in files:
        if not (d / f.name).exists():
            shutil.copy(f, d / f.name)
    return d


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one fresh process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read() if p.stderr else b""
    if status != 0:
        raise RuntimeError(f"{argv[:4]} failed:\n{err.decode()[-3000:]}")
    return wall, ru.ru_utime + ru.ru_stime


def whole_section(hta_python: str, hta_version: str, work: Path, repeats: int) -> list[str]:
    script = Path(sys.executable).parent / "infbench"
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "infbench.cli"]
    rows = []
    for name, files in TRACES.items():
        d = _trace_dir(work, name, files)
        hta, mine = [], []
        for i in range(repeats):
            # Interleaved, so a slow spell on the shared machine hits both alike.
            hta.append(timed([hta_python, "-c", HTA_CHILD, str(d)]))
            mine.append(timed([*cli, "trace", "analyze", str(d)]))
            print(f"whole {name} #{i + 1}: HTA {hta[-1][0]:.2f} s, infbench {mine[-1][0]:.2f} s",
                  flush=True)
        out = subprocess.run([*cli, "trace", "analyze", str(d), "--json"], capture_output=True,
                             text=True, check=True, cwd=ROOT).stdout
        ok, why = agree(run([hta_python, "-c", HTA_CHILD, str(d)], 600), json.loads(out))
        med = [tuple(statistics.median(r[k] for r in runs) for k in (0, 1)) for runs in (hta, mine)]
        rows.append((name, med, "yes" if ok else f"NO: {why}"))
    lines = [
        WHOLE_HEADING, "",
        f"Command: `python benchmarks/bench_traces.py --hta-python ... [--whole-only]` · "
        f"{time.strftime('%Y-%m-%d %H:%M')}",
        f"Machine: {describe(f'holistictraceanalysis {hta_version}')}",
        f"Each figure is the median of {repeats} fresh processes per tool, the two interleaved, "
        "timed from outside (wall; CPU = user + system of the process). HTA: `python -c` that "
        "imports hta, loads the directory with `TraceAnalysis` and runs the four analyses above. "
        f"infbench: `{' '.join(Path(c).name for c in cli)} trace analyze DIR`, the six in-memory "
        "analyses printed as tables to a pipe. Same numbers: `--json` of the same command "
        "against HTA's, as above.", "",
        "| trace | HTA s | HTA CPU s | infbench s | infbench CPU s | speed-up | speed-up (CPU) "
        "| same numbers |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, ((hw, hc), (mw, mc)), same in rows:
        lines.append(f"| {name} | {hw:.2f} | {hc:.2f} | {mw:.3f} | {mc:.3f} | **{hw / mw:.1f}x** | "
                     f"{hc / mc:.1f}x | {same} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hta-python", required=True, help="python of an environment with HTA 0.5.0")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--copies", type=int, default=25, help="replicas of the NCCL trace (25: ~1M events)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--whole-only", action="store_true",
                    help="only the whole-process comparison; the file's other section is kept")
    ap.add_argument("--whole-repeats", type=int, default=7)
    args = ap.parse_args()
    hta_version = subprocess.run([args.hta_python, "-c", "import importlib.metadata as m; "
                                  "print(m.version('holistictraceanalysis'))"],
                                 capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-traces-") as tmp:
        whole = whole_section(args.hta_python, hta_version, Path(tmp), args.whole_repeats)
        if args.whole_only and args.out.exists():
            head = args.out.read_text().split(WHOLE_HEADING)[0].rstrip("\n").split("\n")
        else:
            head = loads_section(args, hta_version, Path(tmp))
    text = "\n".join([*head, "", *whole]) + "\n"
    args.out.write_text(text)
    print(text)


def loads_section(args: argparse.Namespace, hta_version: str, work: Path) -> list[str]:
    rows = []
    big = work / "nccl2_x.json.gz"
    n = replicate(TRACES["nccl2"][0], big, args.copies)
    traces = {**TRACES, f"nccl2 x{args.copies} ({n:,} events)": [big]}
    for name, files in traces.items():
        d = _trace_dir(work, name, files)
        src = str(d if len(files) > 1 else d / files[0].name)
        hta, frame, mine = [], [], []
        for i in range(args.repeats):
            # Interleaved, so a slow spell on the shared machine hits all three alike.
            hta.append(run([args.hta_python, "-c", HTA_CHILD, str(d)], 3600))
            frame.append(run([sys.executable, "-c", FRAME_CHILD, src], 600))
            store = work / f"s{i}.duckdb"
            _new_store(store)
            mine.append(run([sys.executable, "-c", INFBENCH_CHILD, src, str(store)], 600))
            store.unlink()
            print(f"{name} #{i + 1}: HTA {hta[-1]['load_s'] + hta[-1]['analyses_s']:.2f} s, "
                  f"infbench in memory {frame[-1]['load_s'] + frame[-1]['analyses_s']:.2f} s, "
                  f"via store {mine[-1]['load_s'] + mine[-1]['analyses_s']:.2f} s", flush=True)
        ok_f, why_f = agree(hta[0], frame[0])
        ok_s, why_s = agree(hta[0], mine[0])
        med = {k: {f: statistics.median(r[f] for r in runs) for f in
                   ("load_s", "analyses_s", "peak_mb", "import_s", "open_s", "plan_s")
                   if f in runs[0]}
               for k, runs in (("hta", hta), ("frame", frame), ("mine", mine))}
        rows.append((name, mine[0]["events"], med, (ok_f, why_f), (ok_s, why_s)))
    lines = [
        "# Trace import + timeline analysis: infbench vs Holistic Trace Analysis",
        "",
        f"Command: `python benchmarks/bench_traces.py --hta-python ...` · {time.strftime('%Y-%m-%d %H:%M')}",
        f"Machine: {describe(f'holistictraceanalysis {hta_version}')}",
        f"Each figure is the median of {args.repeats} fresh processes per tool, the three tools "
        "interleaved. Load: HTA's `TraceAnalysis(trace_dir)`; infbench in memory: "
        "`TraceFrame.read(path)`; infbench via the store: `import_trace` into an existing store "
        "file. Analyses: temporal breakdown, idle time per stream (with interval stats), kernel "
        "breakdown, comm/comp overlap. Peak: the process's peak RSS (VmHWM). Module imports are "
        "not counted (HTA's ~0.5 s, infbench's ~0.2 s). Same numbers: percentages within 0.1 "
        "points and times within 0.1% of HTA's, for each infbench path.",
        "",
        "| trace | events | HTA load s | HTA analyses s | HTA total s | HTA peak MB | "
        "in memory: load s | analyses s | total s | peak MB | speed-up | "
        "via store: import s (store open) | analyses s (planning) | total s | peak MB | speed-up | "
        "same numbers |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- | --- |",
    ]
    for name, events, med, (ok_f, why_f), (ok_s, why_s) in rows:
        h, f, m = med["hta"], med["frame"], med["mine"]
        th = h["load_s"] + h["analyses_s"]
        tf, tm = f["load_s"] + f["analyses_s"], m["load_s"] + m["analyses_s"]
        same = "yes" if ok_f and ok_s else "; ".join(
            f"NO ({what}): {why}" for what, ok, why in (("in memory", ok_f, why_f),
                                                        ("via store", ok_s, why_s)) if not ok)
        lines.append(f"| {name} | {events:,} | {h['load_s']:.3f} | {h['analyses_s']:.3f} | "
                     f"{th:.3f} | {h['peak_mb']:.0f} | {f['load_s']:.3f} | {f['analyses_s']:.3f} | "
                     f"{tf:.3f} | {f['peak_mb']:.0f} | **{th / tf:.1f}x** | "
                     f"{m['load_s']:.3f} ({m['open_s']:.3f}) | "
                     f"{m['analyses_s']:.3f} ({m['plan_s']:.3f}) | "
                     f"{tm:.3f} | {m['peak_mb']:.0f} | {th / tm:.1f}x | {same} |")
    lines += [
        "",
        "Columns: via the store, the import includes opening the store (in brackets: `open_store` "
        "on the existing file, DuckDB's connect and the schema check) and the analyses include, in "
        "brackets, what planning the six queries alone costs (`EXPLAIN` of the same SQL, measured "
        "after the timed part). Those are fixed per command whatever the trace's size, which is "
        "why the store path is slower than the in-memory one on small traces.",
    ]
    return lines


if __name__ == "__main__":
    main()
