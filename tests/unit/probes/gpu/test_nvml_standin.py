"""The stand-in matches the real binding (nvidia-ml-py) where it is installed: the same
function names and parameters, the same error classes and codes, the same constants; and the
sampler on the real binding either samples a real GPU or says in one line why not."""

from __future__ import annotations

import inspect

import pytest

from probes.gpu.nvml import ERROR_NAMES, NvmlSampler, NvmlUnavailable
from tests.support import nvml_standin as sim

pynvml = pytest.importorskip("pynvml")


def _functions(obj: object) -> list[str]:
    return [n for n in dir(obj) if n.startswith("nvml") and callable(getattr(obj, n))]


def test_every_stand_in_function_exists_with_the_same_parameters() -> None:
    fake = sim.FakeNvml([sim.healthy()])
    names = _functions(fake)
    assert len(names) >= 20
    for name in names:
        real = getattr(pynvml, name, None)
        assert real is not None, f"{name} is not in nvidia-ml-py"
        want = list(inspect.signature(inspect.unwrap(real)).parameters)
        got = list(inspect.signature(getattr(fake, name)).parameters)
        assert got == want, name


def test_error_classes_and_codes_match() -> None:
    for code, name in sim._CLASS_NAMES.items():
        real = pynvml.NVMLError(code)
        fake = sim.NVMLError(code)
        assert type(real).__name__ == type(fake).__name__ == name
        assert real.value == fake.value == code
    for code, name in ERROR_NAMES.items():
        assert getattr(pynvml, f"NVML_ERROR_{name}") == code


def test_constants_match() -> None:
    for const in ("NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_TEMPERATURE_GPU", "NVML_VOLATILE_ECC",
                  "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                  "NVML_NVLINK_MAX_LINKS", "nvmlEventTypeXidCriticalError"):
        assert getattr(sim.FakeNvml, const) == getattr(pynvml, const), const
    for bit, name in [(0x4, "SwPowerCap"), (0x20, "SwThermalSlowdown"), (0x40, "HwThermalSlowdown")]:
        assert getattr(pynvml, f"nvmlClocksEventReason{name}") == bit
        assert getattr(pynvml, f"nvmlClocksThrottleReason{name}") == bit


def test_real_binding_samples_a_gpu_or_says_why_not() -> None:
    sampler = NvmlSampler(pynvml)
    try:
        sampler.open()
    except NvmlUnavailable as exc:
        msg = str(exc)
        assert msg.startswith("GPU probe off: ") and "\n" not in msg
        return
    try:  # a GPU is here: every row has the identity and the core fields
        rows = sampler.sample(0)
        assert rows and all(r["uuid"] and r["sm_clock_max_mhz"] for r in rows)
    finally:
        sampler.close()


def test_device_script_runs_and_says_what_it_checked(tmp_path) -> None:  # noqa: ANN001
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[4] / "tests" / "device" / "gpu_probe_check.py"
    r = subprocess.run([sys.executable, str(script), "--duration", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("NO GPU CHECKED: GPU probe off: ") or "GPU(s) sampled through NVML" in first
