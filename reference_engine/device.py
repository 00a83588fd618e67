"""The simulated GPU: its telemetry in dcgm-exporter's names, and the GPU faults that change
both how it computes and what it reports (`throttle`, `pcie`, `xid`; see faults.py).

One `SimDevice` per engine holds `tensor_parallel_size` GPUs that share one fate (a throttle
or a link fault applies to the engine's GPUs, as a replica on a bad host has them all).
What it changes in behaviour, through the sim executor:

- `throttle:reason=thermal|power|sw,sm_clock_mhz=N`: the SM clock is N instead of the GPU's
  maximum, so compute runs at N/max of its rate: the roofline's compute term (prefill,
  large batches, and the exposed share of a decode step's math) and the per-kernel floor
  stretch by max/N, while the HBM-bound term
  (decode weights and KV reads) does not, so decode slows much less than prefill.
- `pcie:gen=G,width=W`: the host<->device link trained at Gen G xW instead of the board's
  maximum; each step's host<->device copies (input ids and positions, block tables, slot
  mapping up; sampled tokens down) take their bytes over that link's bandwidth.
- `xid:code=N,at_s=T`: T seconds after start the GPU raises XID N. Codes NVIDIA documents as
  recoverable without a reset (63, 64: ECC page retirement / row remapping; 92: high
  single-bit ECC rate) only count ECC errors; every other code (79 fallen off the bus, 48
  double-bit ECC, 43 GPU stopped, 95 uncontained ECC, 119 GSP timeout, ...) loses the device:
  in-flight and later requests are aborted, as a real engine's CUDA context dies with it.

Telemetry follows from what the device did: utilisation and DRAM activity from the steps'
busy time and roofline memory share over the last second, power between idle and the board
power by load (at the limit under a power cap), temperature by load (high under a thermal
throttle), clocks at max under load and at the idle clock with GpuIdle otherwise.

Owns: the per-window busy/memory accumulators (engine thread writes, /metrics reads; one
lock) and the XID clock.
"""

from __future__ import annotations

import math
import socket
import threading
import time
import uuid as uuid_mod
from dataclasses import dataclass

# Nominal board figures for telemetry only (the name NVML reports, max SM / memory clock MHz,
# board power W, PCIe width): NVIDIA datasheets and `nvidia-smi -q` of these boards. Unknown
# GPUs get the H100's.
_BOARDS: dict[str, tuple[str, int, int, float, int]] = {
    "H100-SXM": ("NVIDIA H100 80GB HBM3", 1980, 2619, 700.0, 16),
    "H100-PCIe": ("NVIDIA H100 PCIe", 1755, 1593, 350.0, 16),
    "H200-SXM": ("NVIDIA H200", 1980, 3201, 700.0, 16),
    "A100-80GB-SXM": ("NVIDIA A100-SXM4-80GB", 1410, 1593, 400.0, 16),
    "A100-40GB": ("NVIDIA A100-SXM4-40GB", 1410, 1215, 400.0, 16),
    "L40S": ("NVIDIA L40S", 2520, 9001, 350.0, 16),
    "L4": ("NVIDIA L4", 2040, 6251, 72.0, 16),
    "B200": ("NVIDIA B200", 1965, 3996, 1000.0, 16),
}
IDLE_SM_MHZ = 345
# PCIe per-lane data rate after line encoding, GB/s (PCI-SIG: 2.5/5 GT/s 8b/10b, 8/16/32 GT/s
# 128b/130b, Gen6 64 GT/s PAM4 FLIT ~ 7.56).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
PCIE_WIDTHS = (1, 2, 4, 8, 16)
# Each host<->device copy costs a fixed latency besides its bytes (driver + DMA setup).
COPY_LATENCY_S = 8e-6
COPIES_PER_STEP = 4  # ids+positions, block tables, slot mapping up; sampled ids down

# NVML clocks-event reason bits (nvmlClocksEventReason*), the mask DCGM field 112 carries.
GPU_IDLE, APP_CLOCKS, SW_POWER_CAP, SW_THERMAL = 0x1, 0x2, 0x4, 0x20
THROTTLE_BITS = {"thermal": SW_THERMAL, "power": SW_POWER_CAP, "sw": APP_CLOCKS}
# XIDs after which the GPU keeps working (NVIDIA XID catalogue): ECC page retirement / row
# remapping events and the high single-bit rate warning. The rest are treated as fatal.
RECOVERABLE_XIDS = frozenset({63, 64, 92})
_ECC_CORRECTED_XIDS = frozenset({63, 92})
_ECC_UNCORRECTED_XIDS = frozenset({48, 64, 94, 95})
WINDOW_S = 1.0


class DeviceLost(RuntimeError):
    """The simulated GPU raised a fatal XID."""


@dataclass(frozen=True)
class GpuFaultConfig:
    throttle_reason: str | None = None
    sm_clock_mhz: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    xid_code: int | None = None
    xid_at_s: float = 0.0


class SimDevice:
    def __init__(self, gpu_name: str, tp: int, faults: GpuFaultConfig, pcie_gen_max: int,
                 hostname: str | None = None) -> None:
        self.model_name, sm_max, mem_max, power_w, width_max = _BOARDS.get(gpu_name, _BOARDS["H100-SXM"])
        self.gpu_name, self.tp, self.f = gpu_name, tp, faults
        self.sm_max, self.mem_clock, self.power_limit_w = float(sm_max), float(mem_max), power_w
        self.pcie_gen_max, self.pcie_width_max = pcie_gen_max, width_max
        if faults.sm_clock_mhz is not None and not 0 < faults.sm_clock_mhz <= sm_max:
            raise ValueError(f"fault throttle: sm_clock_mhz must be in (0, {sm_max}] for {gpu_name}")
        if faults.pcie_gen is not None and faults.pcie_gen > pcie_gen_max:
            raise ValueError(f"fault pcie: gen {faults.pcie_gen} is above {gpu_name}'s Gen{pcie_gen_max}")
        self.sm_clock = float(faults.sm_clock_mhz or sm_max)
        self.pcie_gen = faults.pcie_gen or pcie_gen_max
        self.pcie_width = faults.pcie_width or width_max
        self.hostname = hostname or socket.gethostname()
        # Random per engine process: replicas on one host must not share GPU UUIDs.
        self.uuids = [f"GPU-{uuid_mod.uuid4()}" for _ in range(tp)]
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._win_start = self.started
        self._busy = self._mem = 0.0  # seconds of this window: device busy, memory-bound share
        self._pcie_bytes = 0.0
        self._last = (0.0, 0.0, 0.0, 0.0)  # util, dram_active, pcie B/s, when
        self._xid = 0

    # -- behaviour -------------------------------------------------------------------------
    @property
    def clock_ratio(self) -> float:
        """SM clock over its maximum: compute runs at this fraction of its rate."""
        return self.sm_clock / self.sm_max

    @property
    def pcie_bandwidth(self) -> float:
        """Host<->device bytes/s per direction at the trained link."""
        return PCIE_LANE_GBPS[self.pcie_gen] * 1e9 * self.pcie_width

    def transfer_s(self, nbytes: float) -> float:
        return COPIES_PER_STEP * COPY_LATENCY_S + nbytes / self.pcie_bandwidth

    def extra_transfer_s(self, nbytes: float) -> float:
        """What a link trained below the board's maximum adds to moving nbytes. The sim's
        calibrated per-step overhead already holds the copies at full link speed, so a
        healthy link adds exactly nothing."""
        full = PCIE_LANE_GBPS[self.pcie_gen_max] * 1e9 * self.pcie_width_max
        return max(0.0, nbytes / self.pcie_bandwidth - nbytes / full)

    def xid_now(self, now: float | None = None) -> int:
        """The last XID raised so far (0: none); raises DeviceLost once a fatal one is due."""
        f = self.f
        if f.xid_code is None:
            return 0
        now = time.monotonic() if now is None else now
        if now - self.started < f.xid_at_s:
            return 0
        self._xid = f.xid_code
        return f.xid_code

    def lost(self, now: float | None = None) -> bool:
        return self.xid_now(now) != 0 and self.f.xid_code not in RECOVERABLE_XIDS

    def observe_step(self, device_s: float, memory_s: float, pcie_bytes: float, end: float) -> None:
        """A step kept the device busy device_s seconds, memory_s of them HBM-bound."""
        with self._lock:
            # The step ran inside the window it ends in: count it, then close the window.
            self._busy += device_s
            self._mem += min(memory_s, device_s)
            self._pcie_bytes += pcie_bytes
            self._roll(end)

    def _roll(self, now: float) -> None:
        span = now - self._win_start
        if span >= WINDOW_S:
            self._last = (min(1.0, self._busy / span), min(1.0, self._mem / span),
                          self._pcie_bytes / span, now)
            self._win_start, self._busy, self._mem, self._pcie_bytes = now, 0.0, 0.0, 0.0

    # -- telemetry -------------------------------------------------------------------------
    def reading(self, now: float | None = None) -> dict[str, float]:
        """What each of the engine's GPUs reports now (they share one state)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._roll(now)
            util, dram, pcie_bps, _ = self._last
        busy = util > 0.0
        reason = self.f.throttle_reason
        bits = THROTTLE_BITS.get(reason or "", 0)
        idle_w = 0.1 * self.power_limit_w
        if busy:
            sm = self.sm_clock
            mask = bits
            power = idle_w + (0.85 * self.power_limit_w - idle_w) * util
            if reason == "power":
                power = self.power_limit_w * 0.998
        else:
            sm = min(float(IDLE_SM_MHZ), self.sm_clock)
            mask = GPU_IDLE | (bits if reason in ("thermal", "sw") else 0)
            power = idle_w
        temp = 34.0 + 30.0 * util
        if reason == "thermal":
            temp = max(temp, 87.0)
        xid = self.xid_now(now)
        corrected = 1 if xid in _ECC_CORRECTED_XIDS else 0
        uncorrected = 1 if xid in _ECC_UNCORRECTED_XIDS else 0
        return {
            "DCGM_FI_DEV_SM_CLOCK": sm, "DCGM_FI_DEV_MAX_SM_CLOCK": self.sm_max,
            "DCGM_FI_DEV_MEM_CLOCK": self.mem_clock, "DCGM_FI_DEV_MAX_MEM_CLOCK": self.mem_clock,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": mask,
            "DCGM_FI_DEV_POWER_USAGE": round(power, 3),
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": self.power_limit_w,
            "DCGM_FI_DEV_GPU_TEMP": round(temp), "DCGM_FI_DEV_GPU_UTIL": round(100 * util),
            "DCGM_FI_DEV_MEM_COPY_UTIL": round(100 * dram), "DCGM_FI_PROF_DRAM_ACTIVE": round(dram, 4),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(util, 4),
            "DCGM_FI_PROF_PCIE_TX_BYTES": round(pcie_bps / 2), "DCGM_FI_PROF_PCIE_RX_BYTES": round(pcie_bps / 2),
            "DCGM_FI_DEV_PCIE_LINK_GEN": self.pcie_gen, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": self.pcie_gen_max,
            "DCGM_FI_DEV_PCIE_LINK_WIDTH": self.pcie_width,
            "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": self.pcie_width_max,
            "DCGM_FI_DEV_XID_ERRORS": xid,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": corrected, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": uncorrected,
        }


# HELP texts as dcgm-exporter's default-counters.csv words them (type, help).
_HELP: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("gauge", "Maximum SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz)."),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("gauge", "Maximum memory clock frequency (in MHz)."),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("gauge", "Current clock event reasons (bitmask)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("gauge", "Power management limit (in W)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gauge", "Ratio of cycles the device memory interface is active sending or receiving data."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("gauge", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second."),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("gauge", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second."),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("gauge", "PCIe current link generation."),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": ("gauge", "PCIe maximum link generation."),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("gauge", "PCIe current link width."),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": ("gauge", "PCIe maximum link width."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("counter", "Total number of single-bit volatile ECC errors."),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors."),
}


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and not math.isinf(v) else repr(float(v))


def exposition(device: SimDevice, now: float | None = None) -> str:
    """dcgm-exporter-format lines for the device's GPUs (labels gpu, UUID, pci_bus_id, device,
    modelName, Hostname, as dcgm-exporter writes them)."""
    reading = device.reading(now)
    lines: list[str] = []
    for name, value in reading.items():
        kind, text = _HELP[name]
        lines.append(f"# HELP {name} {text}")
        lines.append(f"# TYPE {name} {kind}")
        for i, uuid in enumerate(device.uuids):
            labels = (f'gpu="{i}",UUID="{uuid}",pci_bus_id="00000000:{0x18 + 0x10 * i:02X}:00.0",'
                      f'device="nvidia{i}",modelName="{_esc(device.model_name)}",'
                      f'Hostname="{_esc(device.hostname)}"')
            lines.append(f"{name}{{{labels}}} {_num(value)}")
    return "\n".join(lines) + "\n"
