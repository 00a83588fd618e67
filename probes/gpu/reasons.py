"""NVML clocks-event (formerly "throttle") reasons: the documented bits and their names.

`nvmlDeviceGetCurrentClocksEventReasons` (and the older `...ClocksThrottleReasons`, same
bits) returns a bitmask of why the clocks are below their maximum. dcgm-exporter's
DCGM_FI_DEV_CLOCKS_EVENT_REASONS (formerly DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, field 112)
carries the same mask. Bits from nvidia-ml-py's `pynvml.py` (nvmlClocksEventReason*).
"""

from __future__ import annotations

# Ordered by bit. Names are the NVML constant's suffix in snake case.
REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
_KNOWN = 0
for _bit, _ in REASON_BITS:
    _KNOWN |= _bit

# What each reason means for a slow replica: the clock was lowered by the named limiter.
# gpu_idle and the settings are not a fault; the rest cap the clock under load.
LIMITING = frozenset({
    "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
    "hw_power_brake_slowdown", "sync_boost",
})
THERMAL = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
POWER = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})

NAME_TO_BIT = {name: bit for bit, name in REASON_BITS}


def decode_reasons(mask: int | None) -> list[str]:
    """Names of the set bits, lowest first; an unknown bit is named by its hex value."""
    if mask is None:
        return []
    mask = int(mask)
    if mask < 0:
        raise ValueError(f"clock event reasons: negative mask {mask}")
    names = [name for bit, name in REASON_BITS if mask & bit]
    rest = mask & ~_KNOWN
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return names


def encode_reasons(names: list[str] | tuple[str, ...]) -> int:
    """The mask for the given names (inverse of `decode_reasons` for the known bits)."""
    mask = 0
    for name in names:
        if name not in NAME_TO_BIT:
            raise ValueError(f"clock event reason: {name!r} is not one of {', '.join(NAME_TO_BIT)}")
        mask |= NAME_TO_BIT[name]
    return mask


def names_text(mask: int | None) -> str | None:
    """The `clock_event_names` column: decoded names joined by commas (NULL for no mask)."""
    return None if mask is None else ",".join(decode_reasons(mask))
