"""MBU from the decode steps, and where the rest of the step time went.

MBU = bytes the decode steps had to move / their wall time / the GPU's datasheet bandwidth,
summed over the steps (a time-weighted mean: long steps count for their length).

The missing share (1 - MBU) is split into buckets, in shares of decode step time:

- `kernel_efficiency`: moving the bytes slower than the datasheet rate. From step logs it is
  estimated with a line fitted through the steps, `time = fixed + bytes / achieved_bw`:
  steps that move more bytes (more sequences, longer contexts) take longer in proportion
  to the bandwidth the kernels really reach.
- `host_launch_overhead`: the fixed part of every step (scheduling, sampling, kernel
  launches, synchronisation, gaps between kernels): the line's intercept.
- `padding`: extra rows a CUDA-graph replay runs when the batch is padded up to a captured
  size (their KV and, for MoE, extra experts) moved at the achieved bandwidth.
- `unexplained`: what the line does not account for (stalls, jitter).

The fit needs the steps' bytes to vary; when they hardly do (weights dwarf the KV) the two
main buckets cannot be told apart from step logs, which the result says (`separable`). A
trace measures them instead (`playbooks.mbu.trace`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from playbooks.mbu.setup import ByteModel
from playbooks.mbu.steps import DecodeSteps

MIN_STEPS = 20


@dataclass
class MbuResult:
    mbu: float                       # against the datasheet bandwidth
    achieved_bandwidth: float        # bytes / time over all decode steps (B/s)
    steps: int
    decode_time_s: float
    mean_step_ms: float
    mean_batch: float
    mean_context: float
    bytes_per_step: float
    weight_share: float              # of the bytes
    kv_share: float
    step_mbu_p10: float
    step_mbu_p50: float
    step_mbu_p90: float
    buckets: dict[str, float] = field(default_factory=dict)   # shares of decode time
    fit: dict[str, float] = field(default_factory=dict)
    separable: bool = False


def padded_batch(batch: np.ndarray, capture_sizes: tuple[int, ...]) -> np.ndarray:
    """The batch a CUDA-graph replay runs: the smallest captured size >= the batch; batches
    above the largest size run eagerly, unpadded."""
    if not capture_sizes:
        return batch
    sizes = list(capture_sizes)
    out = batch.copy()
    for i, b in enumerate(batch):
        if b <= sizes[-1]:
            out[i] = sizes[bisect.bisect_left(sizes, int(b))]
    return out


def compute(steps: DecodeSteps, bm: ByteModel, capture_sizes: tuple[int, ...] = ()) -> MbuResult:
    if steps.n == 0:
        raise ValueError("no decode steps in the step log (every step prefilled, or no step log)")
    t, by = steps.dur_s, steps.bytes
    total_t, total_b = float(t.sum()), float(by.sum())
    peak = bm.peak_bandwidth
    mbu = total_b / total_t / peak
    step_mbu = by / t / peak
    res = MbuResult(
        mbu=mbu, achieved_bandwidth=total_b / total_t, steps=steps.n, decode_time_s=total_t,
        mean_step_ms=1e3 * total_t / steps.n, mean_batch=float(steps.batch.mean()),
        mean_context=float(steps.ctx_sum.sum() / steps.batch.sum()),
        bytes_per_step=total_b / steps.n,
        weight_share=float(steps.weight_bytes.sum()) / total_b,
        kv_share=float(steps.kv_bytes.sum()) / total_b,
        step_mbu_p10=float(np.quantile(step_mbu, 0.1)),
        step_mbu_p50=float(np.quantile(step_mbu, 0.5)),
        step_mbu_p90=float(np.quantile(step_mbu, 0.9)))
    res.fit = _fit(t, by)
    pad_rows = padded_batch(steps.batch, capture_sizes) - steps.batch
    # A padding row is a sequence of one token: one token of KV per layer, and for MoE the
    # experts its token routes to beyond those the real rows touch.
    pad_bytes = pad_rows * bm.kv_bytes_per_token + (
        bm.weights(steps.batch + pad_rows) - bm.weights(steps.batch))
    res.separable = _separable(res.fit, steps.n)
    ideal = total_b / peak
    if res.separable:
        slope, icpt = res.fit["slope_s_per_byte"], res.fit["intercept_s"]
        kernel = max(0.0, total_b * (slope - 1.0 / peak))
        overhead = max(0.0, icpt * steps.n)
        padding = float(pad_bytes.sum()) * slope
    else:
        # Not separable: all of it is reported together as one bucket.
        kernel, overhead, padding = total_t - ideal, 0.0, float(pad_bytes.sum()) / res.achieved_bandwidth
    rest = total_t - ideal - kernel - overhead - padding
    res.buckets = {"kernel_efficiency": kernel / total_t, "host_launch_overhead": overhead / total_t,
                   "padding": padding / total_t, "unexplained": rest / total_t}
    res.fit["padded_rows_share"] = float(pad_rows.sum() / (steps.batch + pad_rows).sum())
    return res


def _fit(t: np.ndarray, by: np.ndarray) -> dict[str, float]:
    """Least squares time = intercept + slope * bytes, with the slope's standard error."""
    n = len(t)
    if n < 3 or np.ptp(by) == 0:
        return {"n": float(n), "slope_s_per_byte": float("nan"), "intercept_s": float("nan"),
                "slope_rel_se": float("inf"), "r2": 0.0, "bytes_cv": 0.0}
    x = by - by.mean()
    slope = float((x * (t - t.mean())).sum() / (x * x).sum())
    icpt = float(t.mean() - slope * by.mean())
    resid = t - (icpt + slope * by)
    dof = max(n - 2, 1)
    se = float(np.sqrt((resid * resid).sum() / dof / (x * x).sum()))
    ss = float(((t - t.mean()) ** 2).sum())
    return {"n": float(n), "slope_s_per_byte": slope, "intercept_s": icpt,
            "slope_rel_se": se / abs(slope) if slope else float("inf"),
            "r2": 1.0 - float((resid * resid).sum()) / ss if ss > 0 else 0.0,
            "bytes_cv": float(by.std() / by.mean()),
            "achieved_bandwidth": 1.0 / slope if slope > 0 else float("nan")}


def _separable(fit: dict[str, float], n: int) -> bool:
    # Trust the line only when it is pinned down: enough steps, bytes that vary, a slope
    # known to 10% that is positive, a non-negative intercept and most variance explained.
    return (n >= MIN_STEPS and fit.get("slope_rel_se", float("inf")) < 0.10
            and fit.get("slope_s_per_byte", 0) > 0 and fit.get("intercept_s", -1) >= -1e-4
            and fit.get("r2", 0) >= 0.5)
