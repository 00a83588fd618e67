"""Read one sample of every GPU through NVML (nvidia-ml-py's `pynvml` module).

`NvmlSampler` is handed the module (the real `pynvml`, or the test stand-in that replays
what NVML returns): nothing here imports `pynvml` except `load_nvml`. Every field is read
on its own, so one that the GPU does not support (NVML_ERROR_NOT_SUPPORTED on a consumer
board's ECC counters, NVLink on a PCIe card) or that fails (GPU_IS_LOST, NO_PERMISSION) is
NULL in its row with the error's name in `unavailable`, and the rest are still read.

Units follow NVML's documentation and are converted to the columns': power mW -> W,
memory bytes, clocks MHz, temperature °C, utilisation % of the sample period.
Owns: the NVML session (init/shutdown), the device handles, and the XID event set.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from probes.gpu.reasons import names_text

# Documented constants (nvidia-ml-py 13.615.71 pynvml.py), kept here so the sampler does not
# depend on a module attribute a stand-in or an older binding might lack.
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_NVLINK_MAX_LINKS = 36
EVENT_XID_CRITICAL = 0x8

ERROR_NAMES = {
    1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED", 6: "NOT_FOUND", 7: "INSUFFICIENT_SIZE", 8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED", 10: "TIMEOUT", 11: "IRQ_ISSUE", 12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND", 14: "CORRUPTED_INFOROM", 15: "GPU_IS_LOST", 16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM", 18: "LIB_RM_VERSION_MISMATCH", 19: "IN_USE", 20: "MEMORY",
    21: "NO_DATA", 22: "VGPU_ECC_NOT_SUPPORTED", 23: "INSUFFICIENT_RESOURCES",
    24: "FREQ_NOT_SUPPORTED", 25: "ARGUMENT_VERSION_MISMATCH", 26: "DEPRECATED",
    27: "NOT_READY", 28: "GPU_NOT_FOUND", 29: "INVALID_STATE", 30: "RESET_TYPE_NOT_SUPPORTED",
    999: "UNKNOWN",
}
NOT_SUPPORTED, TIMEOUT, FUNCTION_NOT_FOUND, INVALID_ARGUMENT = 3, 10, 13, 2


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message is the one line to print."""


def load_nvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise NvmlUnavailable(
            "GPU probe off: nvidia-ml-py is not installed (pip install 'infbench[gpu]')") from None


def error_name(exc: BaseException) -> str:
    value = getattr(exc, "value", None)
    return ERROR_NAMES.get(value, f"NVML_ERROR_{value}") if isinstance(value, int) else type(exc).__name__


@dataclass
class _Device:
    index: int
    handle: Any
    static: dict[str, Any] = field(default_factory=dict)
    static_missing: dict[str, str] = field(default_factory=dict)
    nvlinks: list[int] = field(default_factory=list)
    last_xid: int | None = None


class NvmlSampler:
    """One NVML session; `sample()` returns one row per GPU (``t_ns`` = the caller's stamp)."""

    def __init__(self, nvml: ModuleType, *, instance: str | None = None, hostname: str | None = None) -> None:
        self.nvml = nvml
        self.error_type: type[BaseException] = nvml.NVMLError
        self.hostname = hostname or socket.gethostname()
        self.instance = instance or self.hostname
        self.devices: list[_Device] = []
        self._events: Any = None
        self._open = False

    # -- session -------------------------------------------------------------------------
    def open(self) -> None:
        """Start NVML and read what does not change while it runs; NvmlUnavailable if no GPU."""
        try:
            self.nvml.nvmlInit()
        except self.error_type as exc:
            name = error_name(exc)
            why = {"LIBRARY_NOT_FOUND": "no NVIDIA driver here (libnvidia-ml.so.1 not found)",
                   "DRIVER_NOT_LOADED": "the NVIDIA driver is not loaded",
                   "NO_PERMISSION": "no permission to use NVML"}.get(name, f"NVML init failed ({name})")
            raise NvmlUnavailable(f"GPU probe off: {why}") from None
        self._open = True
        try:
            count = self.nvml.nvmlDeviceGetCount()
        except self.error_type as exc:
            self.close()
            raise NvmlUnavailable(f"GPU probe off: NVML could not count GPUs ({error_name(exc)})") from None
        if count == 0:
            self.close()
            raise NvmlUnavailable("GPU probe off: NVML sees no GPU")
        for i in range(count):
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(i)
            except self.error_type:
                continue  # a lost GPU is skipped; the others are still sampled
            dev = _Device(i, handle)
            self._read_static(dev)
            self.devices.append(dev)
        if not self.devices:
            self.close()
            raise NvmlUnavailable("GPU probe off: no GPU handle could be opened")
        self._register_xid()

    def close(self) -> None:
        if self._events is not None:
            with contextlib.suppress(self.error_type):
                self.nvml.nvmlEventSetFree(self._events)
            self._events = None
        if self._open:
            self._open = False
            with contextlib.suppress(self.error_type):
                self.nvml.nvmlShutdown()

    def __enter__(self) -> NvmlSampler:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------
    def _get(self, row: dict[str, Any], missing: dict[str, str], col: str,
             convert: Callable[[Any], Any], fn: Callable[..., Any], *args: Any) -> Any:
        """row[col] = convert(fn(*args)); an NVML error makes it NULL with the error's name."""
        try:
            value = convert(fn(*args))
        except self.error_type as exc:
            row[col] = None
            missing[col] = error_name(exc)
            return None
        row[col] = value
        return value

    def _read_static(self, dev: _Device) -> None:
        n, h, s, m, g = self.nvml, dev.handle, dev.static, dev.static_missing, self._get
        g(s, m, "uuid", _text, n.nvmlDeviceGetUUID, h)
        g(s, m, "model_name", _text, n.nvmlDeviceGetName, h)
        g(s, m, "sm_clock_max_mhz", float, n.nvmlDeviceGetMaxClockInfo, h, NVML_CLOCK_SM)
        g(s, m, "mem_clock_max_mhz", float, n.nvmlDeviceGetMaxClockInfo, h, NVML_CLOCK_MEM)
        g(s, m, "pcie_gen_max", int, n.nvmlDeviceGetMaxPcieLinkGeneration, h)
        g(s, m, "pcie_width_max", int, n.nvmlDeviceGetMaxPcieLinkWidth, h)
        # NVLink: links are numbered from 0; the first link NVML refuses ends the list
        # (NOT_SUPPORTED on a PCIe board, INVALID_ARGUMENT past the last link).
        for link in range(NVML_NVLINK_MAX_LINKS):
            try:
                n.nvmlDeviceGetNvLinkState(h, link)
            except self.error_type as exc:
                if link == 0:
                    m["nvlink_links"] = m["nvlink_active"] = error_name(exc)
                break
            dev.nvlinks.append(link)

    def _register_xid(self) -> None:
        try:
            self._events = self.nvml.nvmlEventSetCreate()
        except self.error_type as exc:
            for dev in self.devices:
                dev.static_missing["xid"] = error_name(exc)
            return
        for dev in self.devices:
            try:
                self.nvml.nvmlDeviceRegisterEvents(dev.handle, EVENT_XID_CRITICAL, self._events)
                dev.last_xid = 0
            except self.error_type as exc:
                dev.static_missing["xid"] = error_name(exc)

    def _drain_xid(self) -> None:
        """Read every XID event queued since the last sample (wait 0 ms: never blocks)."""
        if self._events is None:
            return
        by_handle = {id(d.handle): d for d in self.devices}
        for _ in range(1024):  # bounded: a storm of events cannot hold the sampler
            try:
                data = self.nvml.nvmlEventSetWait_v2(self._events, 0)
            except self.error_type as exc:
                if getattr(exc, "value", None) != TIMEOUT:
                    for dev in self.devices:
                        dev.static_missing.setdefault("xid", error_name(exc))
                return
            if data.eventType & EVENT_XID_CRITICAL:
                hit = by_handle.get(id(data.device))
                if hit is None:
                    hit = next((d for d in self.devices if d.handle == data.device), None)
                if hit is not None:
                    hit.last_xid = int(data.eventData)

    def _reasons(self, h: Any) -> int:
        try:
            return int(self.nvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        except (AttributeError, self.error_type) as exc:
            # Older drivers/bindings: the same bits under the pre-rename name.
            if isinstance(exc, self.error_type) and getattr(exc, "value", None) != FUNCTION_NOT_FOUND:
                raise
            return int(self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))

    def sample(self, t_ns: int) -> list[dict[str, Any]]:
        if not self._open:
            raise RuntimeError("NvmlSampler.sample() before open()")
        self._drain_xid()
        return [self._sample_device(dev, int(t_ns)) for dev in self.devices]

    def _sample_device(self, dev: _Device, t_ns: int) -> dict[str, Any]:
        n, h, g = self.nvml, dev.handle, self._get
        row: dict[str, Any] = {"source": "nvml", "instance": self.instance,
                               "hostname": self.hostname, "gpu": dev.index, "t_ns": t_ns}
        row.update(dev.static)
        m = dict(dev.static_missing)
        g(row, m, "sm_clock_mhz", float, n.nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM)
        g(row, m, "mem_clock_mhz", float, n.nvmlDeviceGetClockInfo, h, NVML_CLOCK_MEM)
        mask = g(row, m, "clock_event_reasons", int, self._reasons, h)
        row["clock_event_names"] = names_text(mask)
        g(row, m, "power_w", _mw_to_w, n.nvmlDeviceGetPowerUsage, h)
        g(row, m, "power_limit_w", _mw_to_w, n.nvmlDeviceGetEnforcedPowerLimit, h)
        g(row, m, "temperature_c", float, n.nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU)
        util = g(row, m, "util_gpu_pct", _same, n.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            row["util_gpu_pct"], row["util_mem_pct"] = float(util.gpu), float(util.memory)
        else:
            row["util_mem_pct"] = None
            m["util_mem_pct"] = m["util_gpu_pct"]
        mem = g(row, m, "mem_used_bytes", _same, n.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            row["mem_used_bytes"], row["mem_total_bytes"] = int(mem.used), int(mem.total)
        else:
            row["mem_total_bytes"] = None
            m["mem_total_bytes"] = m["mem_used_bytes"]
        g(row, m, "pcie_gen", int, n.nvmlDeviceGetCurrPcieLinkGeneration, h)
        g(row, m, "pcie_width", int, n.nvmlDeviceGetCurrPcieLinkWidth, h)
        g(row, m, "pcie_replays", int, n.nvmlDeviceGetPcieReplayCounter, h)
        g(row, m, "ecc_corrected", int, n.nvmlDeviceGetTotalEccErrors, h,
          NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)
        g(row, m, "ecc_uncorrected", int, n.nvmlDeviceGetTotalEccErrors, h,
          NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
        row["xid"] = dev.last_xid
        self._read_nvlinks(dev, row, m)
        row["unavailable"] = json.dumps(m, sort_keys=True) if m else None
        return row

    def _read_nvlinks(self, dev: _Device, row: dict[str, Any], missing: dict[str, str]) -> None:
        if not dev.nvlinks:
            row["nvlink_links"] = row["nvlink_active"] = None
            return
        active, errors = 0, None
        for link in dev.nvlinks:
            try:
                active += 1 if int(self.nvml.nvmlDeviceGetNvLinkState(dev.handle, link)) == 1 else 0
            except self.error_type as exc:
                errors = error_name(exc)
        row["nvlink_links"] = len(dev.nvlinks)
        row["nvlink_active"] = active
        if errors is not None:
            missing["nvlink_active"] = f"{errors} on some links"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _same(v: Any) -> Any:
    return v


def _mw_to_w(v: Any) -> float:
    return int(v) / 1000.0
