"""GPU telemetry charts for the run report: `gpu_samples` on the run's time axis.

Read from the store only. One line per GPU (per replica in a fleet run): SM clock against the
board's maximum, power against its limit with temperature, utilisation with DRAM activity,
and the PCIe link against its maximum. XIDs are marked where they first appear, and the
clock-event (throttle) reasons each GPU reported are named with the share of its samples.
Where a replica has samples from several sources (NVML on this host, its own /metrics,
Prometheus) one is drawn: NVML, else its /metrics, else Prometheus (the finest first).
"""

from __future__ import annotations

from collections import Counter

import duckdb
import numpy as np

from infbench.report.charts import COLORS, Axis, Chart, Mark, Series

TIME = Axis("time since run start", "s")
_SOURCE_ORDER = ("nvml", "engine", "dcgm")


def _short(instance: str) -> str:
    return instance.split("://", 1)[-1].rstrip("/")


def _samples(con: duckdb.DuckDBPyConnection, rid: str) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    have = con.execute("SELECT DISTINCT coalesce(instance, ''), source FROM gpu_samples WHERE run_id = ?",
                       [rid]).fetchall()
    chosen: dict[str, str] = {}
    for inst, src in have:
        if inst not in chosen or _SOURCE_ORDER.index(src) < _SOURCE_ORDER.index(chosen[inst]):
            chosen[inst] = src
    out: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    for inst, src in sorted(chosen.items()):
        rows = con.execute(
            "SELECT coalesce(gpu, -1) AS gpu, t_ns / 1e9 AS t, sm_clock_mhz, sm_clock_max_mhz, power_w, "
            "power_limit_w, temperature_c, util_gpu_pct, 100 * dram_active AS dram_pct, pcie_gen, "
            "pcie_gen_max, pcie_width, pcie_width_max, xid, clock_event_names "
            "FROM gpu_samples WHERE run_id = ? AND coalesce(instance, '') = ? AND source = ? "
            "ORDER BY gpu, t_ns", [rid, inst, src]).fetchnumpy()
        gpus = np.ma.filled(np.ma.asarray(rows["gpu"]), -1)
        for g in np.unique(gpus):
            sel = gpus == g
            cols = {}
            for k, v in rows.items():
                m = np.ma.asarray(v)[sel]
                cols[k] = np.ma.filled(m, None) if m.dtype == object else np.ma.filled(m.astype(float), np.nan)
            out[(inst, int(g))] = cols
    return out


def gpu_charts(con: duckdb.DuckDBPyConnection, rid: str) -> list[Chart]:
    data = _samples(con, rid)
    if not data:
        return []
    several = len({inst for inst, _ in data}) > 1

    def name(key: tuple[str, int]) -> str:
        inst, g = key
        return f"{_short(inst)} GPU {g}" if several else f"GPU {g}"

    clocks, power, util, pcie, marks, reasons = [], [], [], [], [], []
    max_clock: set[float] = set()
    for key, c in data.items():
        t = c["t"]
        clocks.append(Series(f"{name(key)} SM clock", t, c["sm_clock_mhz"]))
        max_clock.update(float(v) for v in c["sm_clock_max_mhz"] if np.isfinite(v))
        power.append(Series(f"{name(key)} power", t, c["power_w"]))
        power.append(Series(f"{name(key)} temperature", t, c["temperature_c"], axis=1))
        util.append(Series(f"{name(key)} GPU util", t, c["util_gpu_pct"]))
        if np.isfinite(c["dram_pct"]).any():
            util.append(Series(f"{name(key)} DRAM active", t, c["dram_pct"]))
        pcie.append(Series(f"{name(key)} PCIe gen", t, c["pcie_gen"], style="step"))
        pcie.append(Series(f"{name(key)} PCIe width", t, c["pcie_width"], axis=1, style="step"))
        xid = c["xid"]
        last = 0.0
        for i, v in enumerate(xid):
            if np.isfinite(v) and v > 0 and v != last:
                marks.append(Mark(float(t[i]), f"XID {int(v)} ({name(key)})", COLORS[3]))
            last = v if np.isfinite(v) else last
        seen: Counter[str] = Counter()
        for names in c["clock_event_names"]:
            for n in filter(None, (names or "").split(",")):
                seen[n] += 1
        if seen:
            share = ", ".join(f"{n} {k / len(t):.0%}" for n, k in seen.most_common())
            reasons.append(f"{name(key)}: {share}")
    limits = sorted({float(v) for c in data.values() for v in c["power_limit_w"] if np.isfinite(v)})
    gen_max = sorted({int(v) for c in data.values() for v in c["pcie_gen_max"] if np.isfinite(v)})
    width_max = sorted({int(v) for c in data.values() for v in c["pcie_width_max"] if np.isfinite(v)})
    clock_note = ("Board maximum " + ", ".join(f"{m:g}" for m in sorted(max_clock)) + " MHz. "
                  if max_clock else "")
    clock_note += ("Clock-event (throttle) reasons, share of samples: " + "; ".join(reasons) + "."
                   if reasons else "No clock-event reasons reported.")
    return [
        Chart("GPU SM clock (gpu_samples)", TIME, [Axis("SM clock", "MHz", max=max(max_clock) if max_clock else None)],
              clocks, note=clock_note, marks=marks, wide=True),
        Chart("GPU power and temperature (gpu_samples)", TIME, [Axis("power draw", "W"), Axis("temperature", "°C")],
              power, note=("Power limit " + ", ".join(f"{v:g}" for v in limits) + " W.") if limits else "",
              marks=marks),
        Chart("GPU utilisation (gpu_samples)", TIME, [Axis("busy", "%", min=0, max=100)], util, marks=marks),
        Chart("GPU PCIe link (gpu_samples)", TIME, [Axis("generation", "gen"), Axis("width", "lanes")], pcie,
              note=(f"Maximum: Gen{'/'.join(map(str, gen_max))} x{'/'.join(map(str, width_max))}; a link "
                    "trained below it reads lower here.") if gen_max else ""),
    ]
