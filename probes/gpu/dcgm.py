"""dcgm-exporter series -> `gpu_samples` rows.

dcgm-exporter publishes one gauge per DCGM field per GPU, labelled ``gpu``, ``UUID``,
``modelName``, ``Hostname`` (and ``pci_bus_id``, ``device``, MIG and pod labels). The same
mapping serves a scrape of its ``/metrics`` (`samples_from_exposition`), a Prometheus range
query over its series (`rows_from_points`) and the reference engine's simulated device,
which exports the same names.

Field names: current DCGM names, the pre-3.3 name of field 112
(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, now DCGM_FI_DEV_CLOCKS_EVENT_REASONS), and the
lower-case names dcgm-exporter 1.x (gpu-monitoring-tools) and custom CSVs use. Units are
converted to the columns' (DCGM gives W, MHz, MiB, %; DRAM_ACTIVE a 0..1 ratio).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from infbench.store.gpu_samples import COLUMNS
from probes.gpu.exposition import parse_exposition
from probes.gpu.reasons import names_text

_MIB = 1 << 20

# metric name -> (column or intermediate key, multiplier). Intermediate keys start with '_'
# and are combined after grouping (memory total, the power limit's preference).
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("mem_clock_max_mhz", 1),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", 1),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("_clock_throttle_reasons", 1),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("_power_mgmt_limit", 1),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu_pct", 1),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem_pct", 1),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 1),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", _MIB),
    "DCGM_FI_DEV_FB_FREE": ("_fb_free", _MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("_fb_reserved", _MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("_fb_total", _MIB),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_gen", 1),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": ("pcie_gen_max", 1),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_width", 1),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": ("pcie_width_max", 1),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replays", 1),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_corrected", 1),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_uncorrected", 1),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", 1),
    # dcgm-exporter 1.x / custom-CSV names
    "dcgm_sm_clock": ("sm_clock_mhz", 1),
    "dcgm_memory_clock": ("mem_clock_mhz", 1),
    "dcgm_gpu_temp": ("temperature_c", 1),
    "dcgm_power_usage": ("power_w", 1),
    "dcgm_gpu_utilization": ("util_gpu_pct", 1),
    "dcgm_mem_copy_utilization": ("util_mem_pct", 1),
    "dcgm_fb_used": ("mem_used_bytes", _MIB),
    "dcgm_fb_free": ("_fb_free", _MIB),
    "dcgm_fb_total": ("_fb_total", _MIB),
    "dcgm_xid_errors": ("xid", 1),
    "dcgm_pcie_replay_counter": ("pcie_replays", 1),
}

_INT_COLUMNS = frozenset({
    "clock_event_reasons", "mem_used_bytes", "mem_total_bytes", "pcie_gen", "pcie_gen_max",
    "pcie_width", "pcie_width_max", "pcie_replays", "ecc_corrected", "ecc_uncorrected", "xid",
})

# PromQL selector for every series this module reads (for a Prometheus range query).
SERIES_REGEX = "|".join(sorted(FIELDS))


# DCGM marks a value it does not have with a sentinel at the top of the type's range
# (dcgm_structs.h: DCGM_INT32_BLANK 0x7ffffff0, DCGM_INT64_BLANK 0x7ffffffffffffff0,
# DCGM_FP64_BLANK 2**47; + 1 not found, + 2 not supported, + 3 not permissioned), and
# dcgm-exporter prints it as the number (e.g. DCGM_FI_DEV_MEMORY_TEMP 9223372036854775794).
_INT32_BLANK = 0x7FFFFFF0
_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
_FP64_BLANK = 140737488355328.0
_BLANK_REASONS = {0: "DCGM_BLANK", 1: "DCGM_NOT_FOUND", 2: "DCGM_NOT_SUPPORTED", 3: "DCGM_NOT_PERMISSIONED"}


def blank_reason(value: float | str) -> str | None:
    """The DCGM blank sentinel's meaning, or None for a real value."""
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("+").isdigit():
            whole = int(text)
            for base in (_INT64_BLANK, _INT32_BLANK):
                if base <= whole < base + 16:
                    return _BLANK_REASONS.get(whole - base, "DCGM_BLANK")
            if whole >= _INT64_BLANK:
                return "DCGM_BLANK"
        value = float(text)
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v) or v >= 9.2e18:  # an int64 sentinel read as a float lost its offset
        return "DCGM_BLANK"
    if _FP64_BLANK <= v < _FP64_BLANK + 16:
        return _BLANK_REASONS.get(int(v - _FP64_BLANK), "DCGM_BLANK")
    if _INT32_BLANK <= v < _INT32_BLANK + 16 and v == int(v):
        return _BLANK_REASONS.get(int(v) - _INT32_BLANK, "DCGM_BLANK")
    return None


def is_gpu_metric(name: str) -> bool:
    return name in FIELDS


def _finish(acc: dict[str, Any]) -> dict[str, Any]:
    if acc.get("clock_event_reasons") is None and acc.get("_clock_throttle_reasons") is not None:
        acc["clock_event_reasons"] = acc["_clock_throttle_reasons"]
    if acc.get("power_limit_w") is None and acc.get("_power_mgmt_limit") is not None:
        acc["power_limit_w"] = acc["_power_mgmt_limit"]
    total = acc.get("_fb_total")
    if total is None and acc.get("mem_used_bytes") is not None and acc.get("_fb_free") is not None:
        total = acc["mem_used_bytes"] + acc["_fb_free"] + (acc.get("_fb_reserved") or 0)
    acc["mem_total_bytes"] = total
    unavailable = acc.get("_unavailable")
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update((k, v) for k, v in acc.items() if not k.startswith("_"))
    row["unavailable"] = json.dumps(unavailable, sort_keys=True) if unavailable else None
    for k in _INT_COLUMNS:
        if row.get(k) is not None:
            row[k] = int(round(row[k]))
    row["clock_event_names"] = names_text(row.get("clock_event_reasons"))
    return row


def rows_from_points(
    points: Iterable[tuple[int, str, Mapping[str, str], float | str]],
    *,
    source: str = "dcgm",
    instance: str | None = None,
) -> list[dict[str, Any]]:
    """(t_ns, metric name, labels, value) points -> one row per (instance, GPU, t_ns).

    ``instance`` names the replica; None takes each series' Prometheus ``instance`` label,
    else its ``Hostname``. Names this module does not map are ignored. A value may be the
    text as written (exact DCGM sentinels); NaN and DCGM's blank sentinels are NULL with the
    reason in ``unavailable``.
    Rows come out ordered by instance, GPU, time.
    """
    groups: dict[tuple[str | None, int | None, str | None, int], dict[str, Any]] = {}
    for t_ns, name, labels, value in points:
        field = FIELDS.get(name)
        if field is None:
            continue
        col, scale = field
        inst = instance if instance is not None else (labels.get("instance") or labels.get("Hostname"))
        gpu_label = labels.get("gpu")
        gpu = int(gpu_label) if gpu_label is not None and gpu_label.isdigit() else None
        uuid = labels.get("UUID")
        key = (inst, gpu, uuid, int(t_ns))
        acc = groups.get(key)
        if acc is None:
            acc = groups[key] = {
                "source": source, "instance": inst, "hostname": labels.get("Hostname"),
                "gpu": gpu, "uuid": uuid, "model_name": labels.get("modelName"), "t_ns": int(t_ns),
            }
        reason = blank_reason(value)
        if reason is None:
            acc[col] = float(value) * scale
        else:
            acc[col] = None
            acc.setdefault("_unavailable", {})[col.lstrip("_")] = reason
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] if kv[0][1] is not None else -1,
                                                     kv[0][2] or "", kv[0][3]))
    return [_finish(acc) for _, acc in ordered]


def samples_from_exposition(
    text: str, t_ns: int, *, instance: str | None, source: str = "dcgm"
) -> list[dict[str, Any]]:
    """One scrape of dcgm-exporter (or the reference engine) `/metrics` -> rows at ``t_ns``.

    Raises `probes.gpu.exposition.ExpositionError` on text that is not exposition format.
    """
    return rows_from_points(((t_ns, s.name, s.labels, s.raw) for s in parse_exposition(text)),
                            source=source, instance=instance)
