"""Kernel tuning tables an engine said it had none of for its device: one finding per device
and kernel, judged against the tables the engine's own release ships (`infbench.specs.tuning`).

Used by the start-up playbook (the log's lines) and the config playbook (a capture's). A
missing table is a warning when some device has one for the same shape (this device in a
newer release, or another device, which then runs tuned kernels where this one runs the
generic default: "the bigger GPU is slower"), and information when no device has one (every
device runs the default, so it is no difference between devices).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from infbench.specs.tuning import KERNELS, ShippedTables, TuningLine, TuningTable, shipped
from playbooks.findings import Evidence, Finding


@dataclass(frozen=True)
class Sighting:
    """One table as one log line named it."""

    line: TuningLine
    line_no: int | None
    rank: str | None


def _nearest(device: str, others: list[str]) -> str:
    """The other device whose name shares the longest start with this one's (NVIDIA_H100...
    for NVIDIA_H200): the likeliest same architecture."""
    return max(others, key=lambda d: (len(os.path.commonprefix([d, device])), d))


def _tune_action(engine: str, table: TuningTable) -> str:
    dtype = f" --dtype {table.dtype}" if table.dtype else ""
    if engine == "sglang" and table.kernel == "fused_moe":
        return ("Tune it on this device: `python benchmark/kernels/fused_moe_triton/"
                f"tuning_fused_moe_triton.py --model MODEL --tp-size TP{dtype} --tune` in "
                "SGLang's source tree; put the JSON it writes in configs/triton_<your Triton "
                "version>/ under SGLANG_MOE_CONFIG_DIR (or SGLang's fused-MoE folder) and restart: "
                "the log then says \"Using MoE kernel config from ...\".")
    if table.kernel == "fused_moe":
        return ("Tune it on this device: `python benchmarks/kernels/benchmark_moe.py --model MODEL "
                f"--tp-size TP{dtype} --tune` in vLLM's source tree; put the JSON it writes in a "
                "folder named by VLLM_TUNED_CONFIG_FOLDER (read before vLLM's own fused_moe/configs/) "
                "and restart: the log then says \"Using configuration from ... for MoE layer.\"")
    if engine == "sglang":
        n, k = (part.split("=")[1] for part in table.shape.split(","))
        return ("Tune it on this device: `python benchmark/kernels/quantization/"
                f"tuning_block_wise_kernel.py --N {n} --K {k}` in SGLang's source tree, and copy "
                "the JSON it writes into the block-FP8 configs folder the log printed.")
    return ("Tune it on this device: `python benchmarks/kernels/benchmark_w8a8_block_fp8.py "
            "--model MODEL --tp-size TP --input-type fp8` in vLLM's source tree, and copy the JSON "
            "files into the block-FP8 configs folder the log printed.")


def _group(sightings: list[Sighting], engine_hint: str | None) -> dict[tuple[str, str, str, str],
                                                                         list[Sighting]]:
    groups: dict[tuple[str, str, str, str], list[Sighting]] = {}
    for s in sightings:
        engine = s.line.engine or engine_hint or "unknown"
        key = (s.line.outcome, engine, s.line.table.kernel, s.line.table.device_name)
        groups.setdefault(key, []).append(s)
    return groups


def _lines_values(group: list[Sighting]) -> dict[str, Any]:
    tables = sorted({s.line.table.file for s in group})
    lines = sorted({s.line_no for s in group if s.line_no is not None})
    return {"tables": "; ".join(tables), "shapes": "; ".join(sorted({s.line.table.describe
                                                                     for s in group})),
            "lines": ", ".join(str(n) for n in lines[:20]) + (" ..." if len(lines) > 20 else ""),
            "ranks": len({s.rank for s in group if s.rank is not None}) or None,
            "first_path": group[0].line.path}


def _missing(engine: str, kernel: str, device: str, group: list[Sighting], sql: str | None,
             where: str) -> Finding:
    release = shipped(engine)
    tables = list({s.line.table.file: s.line.table for s in group}.values())
    gpu = tables[0].catalog_gpu
    named = f"{device} ({gpu} in the GPU catalog)" if gpu else device
    shipped_values: dict[str, Any] = {}
    own: list[TuningTable] = []
    others: dict[str, list[str]] = {}
    if release is not None:
        for t in tables:
            devices = release.devices_for(t)
            if device in devices:
                own.append(t)
            rest = [d for d in devices if d != device]
            if rest:
                others[t.file] = rest
            shipped_values[t.file] = ", ".join(devices) if devices else "no device"
    comparable = bool(own or others)
    first = min((s.line_no for s in group if s.line_no is not None), default=None)
    summary = (f"{engine} found no {KERNELS[kernel]} table for {named} at "
               f"{len(tables)} shape(s) ({'; '.join(sorted(t.describe for t in tables))})"
               + (f", first at {where} {first}" if first is not None else "")
               + ": those layers ran the kernel's generic default launch parameters, not ones "
               "tuned for this device.")
    actions: list[str] = []
    if release is None:
        summary += f" No list of the tables {engine} ships is here to compare devices with."
    elif comparable:
        if own:
            summary += (f" {engine} {release.version} ships {len(own)} of them for this very "
                        "device: the release that ran is older.")
            actions.append(f"Upgrade {engine} to {release.version} or later: it ships "
                           + "; ".join(t.file for t in own) + ".")
        if others:
            devs = sorted({d for ds in others.values() for d in ds})
            summary += (f" {engine} {release.version} ships the same table for "
                        f"{', '.join(devs)}: on those devices the same configuration runs "
                        "tuned kernels, so this device can come out slower than one it beats "
                        "on the spec sheet (`infbench plan compare` lists what the spec sheets "
                        "say).")
    else:
        summary += (f" {engine} {release.version} ships no table of this shape for any device: "
                    "every device runs the default here, so it is no difference between devices.")
    actions.append(_tune_action(engine, tables[0]))
    if others:
        t = next(t for t in tables if t.file in others)
        near = _nearest(device, others[t.file])
        source = release.paths_for(t, near)[0].rsplit("/", 1)[-1] if release else near
        actions.append(f"Or, until it is tuned, copy {source} as {t.file}: tuned for {near}, "
                       "not this device "
                       "(vLLM did so for MI325X from MI300X: "
                       "https://github.com/vllm-project/vllm/pull/28709).")
    evidence = [Evidence("tables_missing", {"engine": engine, "device_name": device,
                                            "catalog_gpu": gpu, "kernel": KERNELS[kernel],
                                            **_lines_values(group)}, sql,
                         "the lines that named each table, as the engine printed them")]
    if release is not None:
        evidence.append(_shipped_evidence(release, shipped_values))
    return Finding("tuning_table_missing",
                   f"No tuned {KERNELS[kernel]} table for {device}: the default kernel ran",
                   0.85 if comparable else 0.7, "warning" if comparable else "info", summary,
                   evidence, actions)


def _shipped_evidence(release: ShippedTables, values: dict[str, Any]) -> Evidence:
    return Evidence("shipped_tables", values, None,
                    f"devices {release.engine} {release.version} ships each table for: "
                    f"{release.source}")


def _fallback(engine: str, kernel: str, device: str, group: list[Sighting], sql: str | None
              ) -> Finding:
    read = sorted({s.line.fallback_to or "another tuned table" for s in group})
    mine = sorted({s.line.triton_dir for s in group if s.line.triton_dir})
    summary = (f"{engine} found no {KERNELS[kernel]} table for {device}"
               + (f" under {', '.join(mine)}" if mine else "")
               + f" and read {'; '.join(read)} instead: tuned for this device, but not for "
               "this Triton version or this projection, so its launch parameters may be off "
               "(SGLang's own comment on the lookup says a table from another Triton can run "
               "slower).")
    return Finding("tuning_table_other_triton",
                   f"{device}'s {KERNELS[kernel]} table is one tuned for something else",
                   0.7, "info", summary,
                   [Evidence("tables_fallback", {"engine": engine, "device_name": device,
                                                 "read_instead": "; ".join(read),
                                                 **_lines_values(group)}, sql)],
                   [_tune_action(engine, group[0].line.table)])


def tuning_findings(sightings: list[Sighting], engine_hint: str | None, sql: str | None,
                    where: str = "line") -> list[Finding]:
    """One finding per (engine, kernel, device) whose table was missing or read from another
    Triton; none for tables found."""
    out: list[Finding] = []
    for (outcome, engine, kernel, device), group in sorted(_group(sightings, engine_hint).items()):
        if outcome == "missing":
            out.append(_missing(engine, kernel, device, group, sql, where))
        elif outcome == "fallback":
            out.append(_fallback(engine, kernel, device, group, sql))
    return out


def tuning_context(sightings: list[Sighting]) -> dict[str, int]:
    counts: dict[str, set[str]] = {}
    for s in sightings:
        counts.setdefault(s.line.outcome, set()).add(s.line.table.file)
    return {f"tuning_tables_{k}": len(v) for k, v in sorted(counts.items())}
