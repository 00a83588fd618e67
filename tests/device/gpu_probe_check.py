"""Device check for the NVML probe: sample this machine's real GPUs with nvidia-ml-py and
check what they return against what the stand-in (tests/support/nvml_standin.py) assumes.

    python tests/device/gpu_probe_check.py [--duration 5] [--interval 0.5] [--out DIR]

On a machine without nvidia-ml-py, without an NVIDIA driver or without a GPU it says so in
one line and exits 0 (nothing to check; not a failure). With GPUs it:
- samples them through `probes.gpu.nvml.NvmlSampler` for --duration seconds;
- checks each row: identity present, SM clock <= its maximum, memory used <= total, PCIe
  generation and width <= their maxima, power within 1.25x its limit, names decoded from the
  clock-event mask;
- checks the binding's return types and units against the stand-in's (ints for clocks in MHz,
  power in mW, a struct with total/free/used in bytes, gpu/memory utilisation, str UUID);
- compares with `nvidia-smi --query-gpu` when it is installed (same clocks, link, power);
- times one `sample()` of all GPUs (the probe's cost per interval);
and writes everything to DIR/gpu_probe_check.json. Exit 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from probes.gpu.nvml import NvmlSampler, NvmlUnavailable, load_nvml  # noqa: E402
from probes.gpu.reasons import decode_reasons  # noqa: E402


def _check_rows(rows: list[dict[str, Any]]) -> list[str]:
    bad = []
    for r in rows:
        g = f"gpu {r['gpu']}"
        if not r.get("uuid") or not r.get("model_name"):
            bad.append(f"{g}: no uuid/name")
        if r["sm_clock_mhz"] is not None and r["sm_clock_max_mhz"] and r["sm_clock_mhz"] > r["sm_clock_max_mhz"] * 1.01:
            bad.append(f"{g}: SM clock {r['sm_clock_mhz']} above max {r['sm_clock_max_mhz']}")
        if r["mem_used_bytes"] is not None and r["mem_used_bytes"] > r["mem_total_bytes"]:
            bad.append(f"{g}: memory used above total")
        for cur, mx in (("pcie_gen", "pcie_gen_max"), ("pcie_width", "pcie_width_max")):
            if r[cur] is not None and r[mx] is not None and r[cur] > r[mx]:
                bad.append(f"{g}: {cur} {r[cur]} above {mx} {r[mx]}")
        if r["power_w"] is not None and r["power_limit_w"] and r["power_w"] > 1.25 * r["power_limit_w"]:
            bad.append(f"{g}: power {r['power_w']} W far above limit {r['power_limit_w']} W (mW/W mix-up?)")
        if r["clock_event_reasons"] is not None and r["clock_event_names"] != ",".join(decode_reasons(r["clock_event_reasons"])):
            bad.append(f"{g}: clock-event names do not match the mask")
    return bad


def _check_types(nvml: Any) -> list[str]:
    """The binding's return types, as the stand-in returns them."""
    bad = []
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    for fn, args in (("nvmlDeviceGetClockInfo", (h, 1)), ("nvmlDeviceGetMaxClockInfo", (h, 1)),
                     ("nvmlDeviceGetPowerUsage", (h,)), ("nvmlDeviceGetEnforcedPowerLimit", (h,)),
                     ("nvmlDeviceGetTemperature", (h, 0)), ("nvmlDeviceGetCurrPcieLinkGeneration", (h,)),
                     ("nvmlDeviceGetCurrPcieLinkWidth", (h,)), ("nvmlDeviceGetCurrentClocksEventReasons", (h,))):
        try:
            v = getattr(nvml, fn)(*args)
        except nvml.NVMLError as exc:
            print(f"  {fn}: NVMLError {exc.value} ({exc})")
            continue
        if not isinstance(v, int):
            bad.append(f"{fn} returned {type(v).__name__}, the stand-in returns int")
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    if not all(isinstance(getattr(mem, k), int) for k in ("total", "free", "used")):
        bad.append("nvmlDeviceGetMemoryInfo: total/free/used are not ints")
    util = nvml.nvmlDeviceGetUtilizationRates(h)
    if not all(isinstance(getattr(util, k), int) for k in ("gpu", "memory")):
        bad.append("nvmlDeviceGetUtilizationRates: gpu/memory are not ints")
    if not isinstance(nvml.nvmlDeviceGetUUID(h), str):
        bad.append("nvmlDeviceGetUUID did not return str")
    return bad


def _nvidia_smi() -> list[dict[str, str]] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    fields = "index,uuid,clocks.sm,clocks.max.sm,power.draw,power.limit,pcie.link.gen.current,pcie.link.width.current"
    out = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return None
    keys = fields.split(",")
    return [dict(zip(keys, (x.strip() for x in line.split(",")), strict=False)) for line in out.stdout.splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--out", type=Path, default=Path("."))
    a = ap.parse_args()
    try:
        nvml = load_nvml()
        sampler = NvmlSampler(nvml)
        sampler.open()
    except NvmlUnavailable as exc:
        print(f"NO GPU CHECKED: {exc}")
        return 0
    report: dict[str, Any] = {"gpus": len(sampler.devices)}
    failures: list[str] = []
    try:
        rows, costs = [], []
        t_end = time.monotonic() + a.duration
        while time.monotonic() < t_end:
            t0 = time.perf_counter()
            rows += sampler.sample(time.monotonic_ns())
            costs.append(time.perf_counter() - t0)
            time.sleep(a.interval)
        failures += _check_rows(rows)
        failures += _check_types(nvml)
        costs.sort()
        report["sample_ms"] = {"median": 1e3 * costs[len(costs) // 2], "max": 1e3 * costs[-1], "n": len(costs)}
        report["unavailable"] = sorted({k for r in rows if r["unavailable"] for k in json.loads(r["unavailable"])})
        report["last"] = rows[-len(sampler.devices):]
        smi = _nvidia_smi()
        report["nvidia_smi"] = smi
        if smi:
            for r in report["last"]:
                s = next((x for x in smi if x["uuid"] == r["uuid"]), None)
                if s is None:
                    failures.append(f"gpu {r['gpu']}: nvidia-smi does not list {r['uuid']}")
                    continue
                if s["clocks.max.sm"].isdigit() and r["sm_clock_max_mhz"] != float(s["clocks.max.sm"]):
                    failures.append(f"gpu {r['gpu']}: max SM clock {r['sm_clock_max_mhz']} vs nvidia-smi {s['clocks.max.sm']}")
                if s["pcie.link.width.current"].isdigit() and r["pcie_width"] != int(s["pcie.link.width.current"]):
                    failures.append(f"gpu {r['gpu']}: PCIe width {r['pcie_width']} vs nvidia-smi {s['pcie.link.width.current']}")
    finally:
        sampler.close()
    report["failures"] = failures
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "gpu_probe_check.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"{report['gpus']} GPU(s) sampled through NVML; one sample of all GPUs took "
          f"{report['sample_ms']['median']:.2f} ms (median of {report['sample_ms']['n']}); "
          f"fields not available: {', '.join(report['unavailable']) or 'none'}")
    for r in report["last"]:
        print(f"  gpu {r['gpu']} {r['model_name']}: SM {r['sm_clock_mhz']}/{r['sm_clock_max_mhz']} MHz, "
              f"reasons [{r['clock_event_names']}], {r['power_w']}/{r['power_limit_w']} W, {r['temperature_c']} C, "
              f"PCIe Gen{r['pcie_gen']}x{r['pcie_width']} of Gen{r['pcie_gen_max']}x{r['pcie_width_max']}, "
              f"ECC {r['ecc_corrected']}/{r['ecc_uncorrected']}, XID {r['xid']}, NVLink {r['nvlink_active']}/{r['nvlink_links']}")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
