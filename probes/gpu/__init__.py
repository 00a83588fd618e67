"""GPU telemetry probes: NVML sampling, dcgm-exporter series (a target's `/metrics` or a
Prometheus server) into the store's `gpu_samples` table.

Public API (others import only these names):
- `samples_from_exposition(text, t_ns, instance=..., source="dcgm"|"engine")`: rows from one
  scrape of dcgm-exporter-format `/metrics` text.
- `rows_from_points(points, source=..., instance=...)`: rows from (t_ns, name, labels, value).
- `insert_gpu_samples(con, run_id, rows)`: write rows (re-exported from `infbench.store`).
- `decode_reasons(mask)`: NVML clock-event reason bits -> names.
"""

from infbench.store.gpu_samples import insert_gpu_samples
from probes.gpu.dcgm import FIELDS, SERIES_REGEX, rows_from_points, samples_from_exposition
from probes.gpu.exposition import ExpositionError, parse_exposition
from probes.gpu.reasons import decode_reasons, encode_reasons

__all__ = [
    "FIELDS",
    "SERIES_REGEX",
    "ExpositionError",
    "decode_reasons",
    "encode_reasons",
    "insert_gpu_samples",
    "parse_exposition",
    "rows_from_points",
    "samples_from_exposition",
]
