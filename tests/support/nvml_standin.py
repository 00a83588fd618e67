"""A stand-in for nvidia-ml-py's `pynvml` module that replays what NVML returns for given
GPU states, for tests on machines without a GPU.

Function names, arguments, return types and units are those of nvidia-ml-py 13.615.71
(`pynvml.py`): clocks in MHz (`nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM=1 / MEM=2)`), power
and its limit in milliwatts, memory as a struct with `total` / `free` / `used` in bytes,
utilisation as a struct with `gpu` / `memory` in %, ECC counts as ints, the clocks-event
reason bitmask as an int, NVLink state 1 = active, names and UUIDs as `str` (the binding
decodes them), XID events through an event set whose `nvmlEventSetWait_v2` returns a struct
with `device`, `eventType` (0x8 = XID critical error) and `eventData` (the XID), or raises
NVML_ERROR_TIMEOUT when nothing is queued. Errors are raised as in the binding:
`NVMLError(code)` makes the per-code subclass (`NVMLError_NotSupported` for 3), and `.value`
is the code. `tests/unit/probes/gpu/test_nvml_standin.py` checks these against the real
binding where it is installed.

A state is a `GpuState`; `errors` maps a function name to the NVML error code it raises
(a field this GPU does not support, a GPU that is lost). Tests change a state between
samples to replay a throttle that starts mid-run or a GPU that falls off the bus.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

_CLASS_NAMES = {
    1: "NVMLError_Uninitialized", 2: "NVMLError_InvalidArgument", 3: "NVMLError_NotSupported",
    4: "NVMLError_NoPermission", 6: "NVMLError_NotFound", 9: "NVMLError_DriverNotLoaded",
    10: "NVMLError_Timeout", 12: "NVMLError_LibraryNotFound", 13: "NVMLError_FunctionNotFound",
    15: "NVMLError_GpuIsLost", 999: "NVMLError_Unknown",
}


class NVMLError(Exception):
    """As the binding's: NVMLError(code) is an instance of that code's subclass."""

    _by_code: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:  # noqa: D102
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, NVMLError)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _CLASS_NAMES.get(self.value, f"NVML error {self.value}").removeprefix("NVMLError_")


for _code, _name in _CLASS_NAMES.items():
    NVMLError._by_code[_code] = type(_name, (NVMLError,), {})

GIB = 1 << 30


@dataclass
class GpuState:
    """What one GPU reports. Defaults: a healthy, busy H100 SXM on PCIe Gen5 x16."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-5f1c2a7e-0000-4000-8000-000000000000"
    sm_clock_mhz: int = 1980
    sm_clock_max_mhz: int = 1980
    mem_clock_mhz: int = 2619
    mem_clock_max_mhz: int = 2619
    clock_event_reasons: int = 0
    power_mw: int = 512_345
    power_limit_mw: int = 700_000
    temperature_c: int = 62
    util_gpu: int = 97
    util_mem: int = 48
    mem_total: int = 80 * GIB
    mem_used: int = 71 * GIB
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    pcie_replays: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    nvlinks: tuple[int, ...] | None = (1,) * 18  # per-link state; None: NVLink not supported
    errors: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code
    pending_xids: list[int] = field(default_factory=list)


# ---- the states tests replay -----------------------------------------------------------------

def healthy(**kw: Any) -> GpuState:
    return replace(GpuState(), **kw)


def thermal_throttle(sm_clock_mhz: int = 1410, hw: bool = False) -> GpuState:
    """Clocks pulled down by heat: SwThermalSlowdown 0x20 (or HwThermalSlowdown 0x40)."""
    return healthy(sm_clock_mhz=sm_clock_mhz, temperature_c=88 if not hw else 93,
                   clock_event_reasons=0x40 if hw else 0x20)


def power_throttle(sm_clock_mhz: int = 1500) -> GpuState:
    """At the power cap: SwPowerCap 0x4, draw at the enforced limit."""
    return healthy(sm_clock_mhz=sm_clock_mhz, power_mw=699_870, clock_event_reasons=0x4)


def sw_throttle(sm_clock_mhz: int = 1200) -> GpuState:
    """Clocks held by a software setting: ApplicationsClocksSetting 0x2 + HwSlowdown 0x8."""
    return healthy(sm_clock_mhz=sm_clock_mhz, clock_event_reasons=0x2 | 0x8)


def idle() -> GpuState:
    return healthy(sm_clock_mhz=345, util_gpu=0, util_mem=0, power_mw=71_250,
                   clock_event_reasons=0x1, mem_used=512 << 20)


def pcie_trained_low(gen: int = 3, width: int = 8) -> GpuState:
    return healthy(pcie_gen=gen, pcie_width=width)


def ecc_errors(corrected: int = 12, uncorrected: int = 1) -> GpuState:
    return healthy(ecc_corrected=corrected, ecc_uncorrected=uncorrected)


def consumer_board() -> GpuState:
    """A GeForce-class card: no ECC, no NVLink, enforced limit readable, replay counter not."""
    return healthy(name="NVIDIA GeForce RTX 4090", mem_total=24 * GIB, mem_used=20 * GIB,
                   sm_clock_max_mhz=3105, sm_clock_mhz=2520, mem_clock_mhz=10501,
                   mem_clock_max_mhz=10501, pcie_gen_max=4, pcie_gen=4, power_limit_mw=450_000,
                   power_mw=401_000, nvlinks=None, errors={
                       "nvmlDeviceGetTotalEccErrors": NVML_ERROR_NOT_SUPPORTED,
                       "nvmlDeviceGetPcieReplayCounter": NVML_ERROR_NOT_SUPPORTED,
                       "nvmlDeviceRegisterEvents": NVML_ERROR_NOT_SUPPORTED})


def lost() -> GpuState:
    """A GPU that fell off the bus (XID 79): every device call fails with GPU_IS_LOST."""
    return healthy(errors=dict.fromkeys(_DEVICE_CALLS, NVML_ERROR_GPU_IS_LOST))


_DEVICE_CALLS = (
    "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetNvLinkState",
)


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<c_nvmlDevice_t gpu {self.index}>"


class FakeNvml:
    """Module-like: `sampler = NvmlSampler(FakeNvml([healthy(), thermal_throttle()]))`.

    ``init_error``: the code nvmlInit raises (LIBRARY_NOT_FOUND: no driver installed).
    ``calls`` counts every function called, for tests that check what was read.
    """

    NVMLError = NVMLError
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_NVLINK_MAX_LINKS = 36
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, gpus: list[GpuState], *, init_error: int | None = None,
                 event_reasons: str = "present") -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.initialised = 0
        self.calls: Counter[str] = Counter()
        self._handles = [_Handle(i) for i in range(len(gpus))]
        self._registered: dict[int, int] = {}
        self.event_sets_open = 0
        # "present"; "missing": a binding older than the clocks-event rename (no such
        # attribute); "function_not_found": a new binding on a driver without the symbol.
        self.event_reasons = event_reasons
        if event_reasons == "missing":
            self.__class__ = _OldBinding

    # -- helpers -------------------------------------------------------------------------
    def _state(self, name: str, handle: _Handle) -> GpuState:
        self.calls[name] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if not isinstance(handle, _Handle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        st = self.gpus[handle.index]
        code = st.errors.get(name)
        if code is not None:
            raise NVMLError(code)
        return st

    def set_state(self, index: int, state: GpuState) -> None:
        """Replace a GPU's state between samples (pending XIDs carry over)."""
        state.pending_xids = self.gpus[index].pending_xids + state.pending_xids
        self.gpus[index] = state

    def raise_xid(self, index: int, code: int) -> None:
        self.gpus[index].pending_xids.append(code)

    # -- session -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self.calls["nvmlDeviceGetCount"] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self.calls["nvmlDeviceGetHandleByIndex"] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if "nvmlDeviceGetHandleByIndex" in self.gpus[index].errors:
            raise NVMLError(self.gpus[index].errors["nvmlDeviceGetHandleByIndex"])
        return self._handles[index]

    # -- identity, clocks ----------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._state("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._state("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetClockInfo(self, handle: _Handle, type: int) -> int:  # noqa: A002
        st = self._state("nvmlDeviceGetClockInfo", handle)
        if type == 1:
            return st.sm_clock_mhz
        if type == 2:
            return st.mem_clock_mhz
        if type in (0, 3):
            return st.sm_clock_mhz if type == 0 else 1755
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, type: int) -> int:  # noqa: A002
        st = self._state("nvmlDeviceGetMaxClockInfo", handle)
        if type in (0, 1):
            return st.sm_clock_max_mhz
        if type == 2:
            return st.mem_clock_max_mhz
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        if self.event_reasons == "function_not_found":
            self.calls["nvmlDeviceGetCurrentClocksEventReasons"] += 1
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._state("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:
        return self._state("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_event_reasons

    # -- power, heat, load, memory -------------------------------------------------------
    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._state("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._state("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        st = self._state("nvmlDeviceGetTemperature", handle)
        if sensor != 0:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return st.temperature_c

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        st = self._state("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=st.util_gpu, memory=st.util_mem)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: Any = None) -> SimpleNamespace:
        st = self._state("nvmlDeviceGetMemoryInfo", handle)
        return SimpleNamespace(total=st.mem_total, free=st.mem_total - st.mem_used, used=st.mem_used)

    # -- PCIe, ECC, NVLink ---------------------------------------------------------------
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._state("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._state("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:
        return self._state("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:
        return self._state("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max

    def nvmlDeviceGetPcieReplayCounter(self, handle: _Handle) -> int:
        return self._state("nvmlDeviceGetPcieReplayCounter", handle).pcie_replays

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, errorType: int, counterType: int) -> int:  # noqa: N803
        st = self._state("nvmlDeviceGetTotalEccErrors", handle)
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return st.ecc_corrected if errorType == 0 else st.ecc_uncorrected

    def nvmlDeviceGetNvLinkState(self, device: _Handle, link: int) -> int:
        st = self._state("nvmlDeviceGetNvLinkState", device)
        if st.nvlinks is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(st.nvlinks):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return st.nvlinks[link]

    # -- XID events ----------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> object:
        self.calls["nvmlEventSetCreate"] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        self.event_sets_open += 1
        return object()

    def nvmlDeviceRegisterEvents(self, handle: _Handle, eventTypes: int, eventSet: object) -> None:  # noqa: N803
        self._state("nvmlDeviceRegisterEvents", handle)
        self._registered[handle.index] = self._registered.get(handle.index, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: object, timeoutms: int) -> SimpleNamespace:  # noqa: N803
        self.calls["nvmlEventSetWait_v2"] += 1
        for i, st in enumerate(self.gpus):
            if st.pending_xids and self._registered.get(i, 0) & 0x8:
                return SimpleNamespace(device=self._handles[i], eventType=0x8,
                                       eventData=st.pending_xids.pop(0), gpuInstanceId=0xFFFFFFFF,
                                       computeInstanceId=0xFFFFFFFF)
        raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, eventSet: object) -> None:
        self.calls["nvmlEventSetFree"] += 1
        self.event_sets_open -= 1


class _OldBinding(FakeNvml):
    """nvidia-ml-py before the clocks-event rename: only the Throttle name exists."""

    @property
    def nvmlDeviceGetCurrentClocksEventReasons(self) -> Any:  # noqa: N802
        raise AttributeError("nvmlDeviceGetCurrentClocksEventReasons")
