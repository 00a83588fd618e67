"""Clock-event reason bits decode to the documented names, both ways."""

from __future__ import annotations

import pytest

from probes.gpu.reasons import REASON_BITS, decode_reasons, encode_reasons, names_text


def test_each_documented_bit() -> None:
    expected = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                0x100: "display_clock_setting"}
    assert dict(REASON_BITS) == expected
    for bit, name in expected.items():
        assert decode_reasons(bit) == [name]
        assert encode_reasons([name]) == bit


def test_combined_unknown_and_empty() -> None:
    assert decode_reasons(0x1 | 0x40 | 0x4) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert decode_reasons(0x200 | 0x8) == ["hw_slowdown", "0x200"]
    assert decode_reasons(0) == [] and names_text(0) == "" and names_text(None) is None
    with pytest.raises(ValueError):
        decode_reasons(-1)
    with pytest.raises(ValueError):
        encode_reasons(["thermal"])
