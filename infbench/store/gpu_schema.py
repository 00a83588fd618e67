"""Schema version 7: GPU telemetry samples (`gpu_samples`), one row per GPU per sample.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration. Written by `probes.gpu` (the NVML sampler during `infbench run` and
`infbench probe gpu`, dcgm-exporter series read from a target's `/metrics` or from a
Prometheus server) through `infbench.store.gpu_samples.insert_gpu_samples`;
`docs/store.md` says what every column means.

Units are fixed per column whatever the source reported (NVML gives milliwatts and bytes,
dcgm-exporter watts and MiB): the column name carries the unit. A value the source did not
have (a field the GPU does not support, an NVML error, a counter dcgm-exporter was not
configured to export) is NULL, and for NVML the reason is in ``unavailable``.
"""

from __future__ import annotations

GPU_MIGRATION_DESCRIPTION = (
    "gpu_samples: GPU telemetry (NVML, dcgm-exporter, the reference engine's simulated device) "
    "per GPU per sample on the run's time axis"
)

# (name, DuckDB type), run_id first. The single source of truth for the DDL and the Arrow
# schema the writer uses.
GPU_SAMPLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"),
    ("source", "VARCHAR"),          # nvml | dcgm | engine
    ("instance", "VARCHAR"),        # the replica: target URL or host:port it was read from
    ("hostname", "VARCHAR"),
    ("gpu", "INTEGER"),             # NVML index / dcgm-exporter's `gpu` label
    ("uuid", "VARCHAR"),
    ("model_name", "VARCHAR"),
    ("t_ns", "BIGINT"),             # run's time axis (ns since runs.t0_monotonic_ns)
    ("sm_clock_mhz", "DOUBLE"),
    ("sm_clock_max_mhz", "DOUBLE"),
    ("mem_clock_mhz", "DOUBLE"),
    ("mem_clock_max_mhz", "DOUBLE"),
    ("clock_event_reasons", "BIGINT"),   # NVML clocks-event (throttle) reason bitmask
    ("clock_event_names", "VARCHAR"),    # the bits decoded, comma-separated
    ("power_w", "DOUBLE"),
    ("power_limit_w", "DOUBLE"),
    ("temperature_c", "DOUBLE"),
    ("util_gpu_pct", "DOUBLE"),
    ("util_mem_pct", "DOUBLE"),
    ("dram_active", "DOUBLE"),           # DCGM_FI_PROF_DRAM_ACTIVE, 0..1
    ("mem_used_bytes", "BIGINT"),
    ("mem_total_bytes", "BIGINT"),
    ("pcie_gen", "INTEGER"),
    ("pcie_gen_max", "INTEGER"),
    ("pcie_width", "INTEGER"),
    ("pcie_width_max", "INTEGER"),
    ("pcie_replays", "BIGINT"),
    ("ecc_corrected", "BIGINT"),
    ("ecc_uncorrected", "BIGINT"),
    ("xid", "INTEGER"),                  # last XID seen (0: none)
    ("nvlink_active", "INTEGER"),
    ("nvlink_links", "INTEGER"),
    ("unavailable", "VARCHAR"),          # JSON {column: reason} for NULLs the source explained
)

GPU_DDL: tuple[str, ...] = (
    "CREATE TABLE gpu_samples (\n  "
    + ",\n  ".join(f"{n} {t}" for n, t in GPU_SAMPLE_COLUMNS)
    + "\n)",
)
