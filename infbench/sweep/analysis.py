"""What a sweep found: the throughput-latency curve, its knee, the goodput-max point, and a
line fit of step time in batch size set beside the roofline's line for the same model/GPU.

The knee is reported two ways. On the measured curve (latency against throughput) it is the
Kneedle point among the points up to saturation (`saturation.py`), and none at all when the
sweep never saturated: where more load stops buying throughput and starts costing latency.
From the step-time line
`t(B) = a + b B` it is `B = a / b`, the batch at which throughput is half its limit `1/b`;
that is the definition `infbench plan roofline` uses, so the two can be compared directly.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import duckdb
import numpy as np

from infbench.slo import slo_condition_sql
from infbench.specs import get_gpu, get_model
from infbench.specs.gpus import EXPOSED_OVERLAP, decode_kernel_floor_s
from infbench.specs.roofline import step_time
from infbench.specs.throughput import roofline_report
from infbench.sweep.saturation import LoadPoint, knee, saturation


@dataclass
class PointResult:
    idx: int
    run_id: str
    kind: str
    value: float
    request_throughput: float
    output_throughput: float
    p50_ttft_ms: float | None
    p99_ttft_ms: float | None
    p50_tpot_ms: float | None
    p50_itl_ms: float | None
    p50_e2el_ms: float | None
    p99_e2el_ms: float | None
    mean_batch: float | None  # decode sequences per step (engine log), else Little's law on ITL
    goodput: float | None
    failed: int = 0


@dataclass
class StepLine:
    intercept_ms: float
    slope_ms: float
    source: str  # engine_steps | itl
    batches: list[float]
    max_relative_error: float

    @property
    def knee_batch(self) -> float:
        return self.intercept_ms / self.slope_ms if self.slope_ms > 0 else float("inf")


def point_result(con: duckdb.DuckDBPyConnection, idx: int, run_id: str, kind: str, value: float,
                 slo: dict[str, float]) -> PointResult:
    row = con.execute("SELECT summary FROM runs WHERE run_id = ?", [run_id]).fetchone()
    s = json.loads(row[0]) if row and row[0] else {}
    batch = con.execute("SELECT avg(decode_seqs) FROM engine_steps WHERE run_id = ? AND decode_seqs > 0",
                        [run_id]).fetchone()
    mean_batch = float(batch[0]) if batch and batch[0] is not None else None
    if mean_batch is None and s.get("mean_itl_ms"):
        mean_batch = s["output_throughput"] * s["mean_itl_ms"] / 1e3  # Little's law on tokens
    goodput = None
    if slo:
        good = con.execute(f"SELECT count(*) FROM request_latency WHERE run_id = ? AND phase = 'measure' "
                           f"AND error_class IS NULL AND {slo_condition_sql(slo)}", [run_id]).fetchone()
        goodput = (int(good[0]) if good else 0) / max(float(s.get("duration") or 0.0), 1e-9)
    return PointResult(idx, run_id, kind, value, float(s.get("request_throughput", 0.0)),
                       float(s.get("output_throughput", 0.0)), s.get("p50_ttft_ms"), s.get("p99_ttft_ms"),
                       s.get("p50_tpot_ms"), s.get("p50_itl_ms"), s.get("p50_e2el_ms"),
                       s.get("p99_e2el_ms"), mean_batch, goodput, int(s.get("failed") or 0))


def load_points(results: list[PointResult]) -> list[LoadPoint]:
    """The curve saturation is judged on: the closed-loop points when there are any (an auto
    sweep's concurrency ramp), else the open-loop rates."""
    kind = "concurrency" if any(p.kind == "concurrency" for p in results) else "rate"
    out = []
    for p in results:
        if p.kind != kind:
            continue
        share = (p.goodput / p.request_throughput if p.goodput is not None and p.request_throughput > 0
                 else (0.0 if p.goodput is not None else None))
        out.append(LoadPoint(p.idx, p.value, p.output_throughput,
                             p.p50_e2el_ms if p.p50_e2el_ms is not None else p.p50_tpot_ms,
                             share, p.failed))
    return out


# The device's own step time at one batch size is the most common step duration: a busy
# host delays steps (a delay only adds), and an engine that keeps a device clock (the
# bundled engine, like a GPU running ahead of its host) makes up a late step by a short one
# after it. A lower quantile follows the short catch-up steps once more than a quarter of
# the steps are late (a CI host: intercept 0.86x and slope 1.59x the model's); the median
# follows the delays once more than half are late. The half-sample mode (Bickel's: the
# shortest half of the sample, halved again until a few values remain) sits on the on-time
# steps in both cases.
def half_sample_mode(values: np.ndarray) -> float:
    x = np.sort(np.asarray(values, dtype=float))
    while len(x) > 3:
        h = (len(x) + 1) // 2
        i = int(np.argmin(x[h - 1:] - x[:len(x) - h + 1]))
        x = x[i:i + h]
    if len(x) == 3:  # the closer pair's mean (the middle value when equally close)
        lo, hi = x[1] - x[0], x[2] - x[1]
        return float(x[1] if lo == hi else (x[:2] if lo < hi else x[1:]).mean())
    return float(x.mean())


def fit_line(batch: np.ndarray, ms: np.ndarray, source: str) -> StepLine | None:
    """Least squares of step time on batch size, over each batch size's most common step
    time (`half_sample_mode`): host delays and the catch-up steps after them do not pull
    the line. Each batch size weighs by its number of steps (a mode's variance falls as
    1/n): a sweep's few loads hold hundreds of steps each, while the batch sizes passed
    through on the way (a slot refilled, a prefill in between) hold a handful, and a handful
    can all be late together (CI: one such size 7.5% off the line took the knee 29% off)."""
    batch, ms = np.asarray(batch, float), np.asarray(ms, float)
    sizes, inverse, counts = np.unique(batch, return_inverse=True, return_counts=True)
    if sizes.size < 2:
        return None
    mode = np.array([half_sample_mode(ms[inverse == i]) for i in range(sizes.size)])
    slope, intercept = np.polyfit(sizes, mode, 1, w=np.sqrt(counts))
    err = float(np.max(np.abs(intercept + slope * sizes - mode) / mode))
    return StepLine(float(intercept), float(slope), source, [float(b) for b in sizes], err)


def step_line(con: duckdb.DuckDBPyConnection, run_ids: list[str], points: list[PointResult]) -> StepLine | None:
    steps = con.execute(
        "SELECT decode_seqs, (end_s - start_s) * 1e3 AS ms FROM engine_steps "
        "WHERE list_contains(?, run_id) AND prefill_tokens = 0 AND decode_seqs > 0", [run_ids]).fetchnumpy()
    if len(steps["ms"]) >= 10:
        # Batch sizes seen in fewer than 5 steps are transients (ramp-up, drain).
        b, counts = np.unique(steps["decode_seqs"], return_counts=True)
        keep = np.isin(steps["decode_seqs"], b[counts >= 5])
        line = fit_line(steps["decode_seqs"][keep], steps["ms"][keep], "engine_steps")
        if line is not None:
            return line
    pts = [p for p in points if p.mean_batch is not None and p.p50_itl_ms is not None]
    if len(pts) < 2:
        return None
    return fit_line(np.array([p.mean_batch for p in pts]), np.array([p.p50_itl_ms for p in pts]), "itl")


def mean_context(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> float:
    """Tokens a decoding sequence attends to on average: its prompt plus half its output."""
    row = con.execute("SELECT avg(coalesce(prompt_tokens, target_input_tokens) + output_tokens / 2.0) "
                      "FROM requests WHERE list_contains(?, run_id) AND error_class IS NULL", [run_ids]).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def roofline_comparison(engine: dict[str, Any], context: float, max_batch: int, line: StepLine | None
                        ) -> dict[str, Any] | None:
    """The roofline's line for the engine's model and GPU beside the measured one."""
    try:
        model, gpu = get_model(str(engine["model"])), get_gpu(str(engine["gpu"]))
    except (KeyError, ValueError):
        return None
    kv = engine.get("kv_cache_dtype") or "auto"
    weights = engine.get("dtype") or "bf16"
    tp = int(engine.get("tensor_parallel_size") or 1)
    ctx, kv_format = max(int(round(context)), 1), weights if kv == "auto" else kv
    r = roofline_report(model, gpu, tp, weights, kv_format, context=ctx,
                        max_num_seqs=max(max_batch, 2))
    floor_ms = decode_kernel_floor_s(model.num_layers, tp) * 1e3
    # Below the knee each sequence adds its math, of which a real step exposes a share beside
    # the weight stream (specs.gpus.EXPOSED_OVERLAP): a slope of its own.
    per_seq = [step_time(model, gpu, tp=tp, weight_format=weights, kv_format=kv_format,
                         decode_contexts=[ctx] * n).compute_s for n in (1, 2)]
    exposed_slope_ms = EXPOSED_OVERLAP * (per_seq[1] - per_seq[0]) * 1e3
    out: dict[str, Any] = {
        "model": model.name, "gpu": gpu.name, "context": round(context),
        "roofline_intercept_ms": r.line.intercept_s * 1e3, "roofline_slope_ms": r.line.slope_s * 1e3,
        "roofline_knee_batch": r.line.knee_batch,
        "engine_step_overhead_ms": engine.get("step_overhead_ms"),
        # Per-kernel device time the roofline's bytes and FLOPs leave out; a real step pays
        # it too, so the measured line's intercept is compared with it taken off.
        "kernel_floor_ms": floor_ms,
        "exposed_compute_slope_ms": exposed_slope_ms,
    }
    if line is not None:
        overhead = float(engine.get("step_overhead_ms") or 0.0) + floor_ms
        # The measured line with the engine's own costs taken off: the floor and overhead from
        # its intercept, the exposed compute from its slope.
        slope = line.slope_ms - exposed_slope_ms
        out["measured_knee_batch"] = line.knee_batch
        out["measured_knee_batch_without_overhead"] = (
            (line.intercept_ms - overhead) / slope if slope > 0 else None)
        out["slope_ratio"] = slope / (r.line.slope_s * 1e3)
        out["intercept_ratio_without_overhead"] = (line.intercept_ms - overhead) / (r.line.intercept_s * 1e3)
    return out


def analyse(con: duckdb.DuckDBPyConnection, points: list[tuple[int, str, str, float]], slo: dict[str, float],
            engine: dict[str, Any] | None) -> dict[str, Any]:
    results = [point_result(con, i, rid, kind, v, slo) for i, rid, kind, v in points]
    run_ids = [p.run_id for p in results]
    curve = load_points(results)
    sat = saturation(curve)
    knee_idx = knee(curve, sat)
    knee_point = next((p for p in results if p.idx == knee_idx), None)
    best = max((p for p in results if p.goodput is not None), key=lambda p: p.goodput or 0.0, default=None)
    line = step_line(con, run_ids, results)
    max_batch = int(max((p.mean_batch or 1.0 for p in results), default=1.0)) + 1
    roof = roofline_comparison(engine, mean_context(con, run_ids), max_batch, line) if engine else None
    return {
        "points": [asdict(p) for p in results],
        "knee": asdict(knee_point) if knee_point else None,
        "saturation": {"reached": sat.reached, "reason": sat.reason, "at_idx": sat.at_idx},
        "goodput_max": asdict(best) if best else None,
        "slo_ms": slo,
        "step_line": {**asdict(line), "knee_batch": line.knee_batch} if line else None,
        "roofline": roof,
    }
