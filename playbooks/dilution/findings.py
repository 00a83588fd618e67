"""The verdict of a dilution: the part that makes most of the headline metric's gap, with the
measurements behind it (each property in both runs, each configuration's metrics) and what to
benchmark instead."""

from __future__ import annotations

from typing import Any

from playbooks.dilution.attribution import Figure
from playbooks.dilution.metrics import HIGHER_IS_BETTER, UNITS, RunMetrics
from playbooks.dilution.properties import PROPERTIES, TITLES, RunProfile
from playbooks.findings import Evidence, Finding

# A gap smaller than this share of the benchmark's value (or inside its own interval) is no
# dilution worth a warning.
MATERIAL = 0.05


def _fix(name: str, prod: RunProfile) -> str:
    f = prod.figures
    if name == "input_lengths":
        x = f["input_lengths"]
        return (f"Benchmark with production's prompt lengths (p50 {x['p50']:.0f}, p90 {x['p90']:.0f} "
                "tokens): `--input-tokens`, or replay its trace (`--workload trace`).")
    if name == "output_lengths":
        x = f["output_lengths"]
        return (f"Benchmark with production's output lengths (p50 {x['p50']:.0f}, p90 {x['p90']:.0f} "
                "tokens): `--output-tokens`.")
    if name == "prefix_share":
        return (f"Production's prompts share {f['prefix_share'].get('share', 0):.0%} of their tokens as a "
                "cached prefix: benchmark with that share (`--workload prefix --prefix-tokens`), and check "
                "prefix caching is on where it is high.")
    if name == "arrivals":
        if prod.closed_slots is not None:
            return f"Benchmark at production's concurrency: `--arrival closed --concurrency {prod.closed_slots}`."
        a = f["arrivals"]
        cv2 = a.get("gap_cv2") or 1.0
        return (f"Benchmark production's arrivals: `--arrival gamma --rate {a.get('rate_per_s') or 0:.2f} "
                f"--burstiness {1 / max(cv2, 1e-3):.2f}` (inter-arrival CV² {cv2:.2f}), or replay its trace.")
    if name == "sampling":
        return f"Benchmark with production's sampling: `--temperature {prod.temperature}`."
    return (f"{prod.structured.mean():.0%} of production's requests ask for a JSON schema: benchmark "
            "them (`--workload structured`) and see `infbench diagnose structured`.")


def _fmt(x: float, unit: str) -> str:
    return f"{x:+,.1f} {unit}" if abs(x) >= 10 else f"{x:+,.3g} {unit}"


def verdict_finding(bench: RunProfile, prod: RunProfile, figs: list[Figure], metric: str, method: str,
                    bm: RunMetrics, pm: RunMetrics, configs: dict[str, dict[str, Any]],
                    session_sql: str | None) -> Finding:
    unit = UNITS[metric]
    gap = figs[0]
    parts = [f for f in figs if f.kind == "part"]
    inter = next(f for f in figs if f.kind == "interaction")
    sign = 1.0 if gap.value >= 0 else -1.0
    ranked = sorted([*parts, inter], key=lambda f: -f.value * sign)
    top = ranked[0]
    worse = (gap.value < 0) == HIGHER_IS_BETTER[metric]
    material = abs(gap.value) > max(gap.uncertainty, MATERIAL * abs(bm.value[metric]))
    share = top.value / gap.value if gap.value else 0.0
    name = TITLES.get(top.name, "the interaction left over (no single property)")
    title = (f"{name[0].upper()}{name[1:]}: {share:.0%} of the {metric} gap" if material
             else f"No material {metric} gap between the benchmark and production")
    rest = ", ".join(f"{f.name} {_fmt(f.value, unit)} ± {f.uncertainty:.3g}" for f in ranked[1:])
    summary = (f"{metric}: benchmark {bm.value[metric]:,.4g}, production {pm.value[metric]:,.4g} {unit} "
               f"(gap {_fmt(gap.value, unit)} ± {gap.uncertainty:.3g}, {'worse' if worse else 'better'} in "
               f"production). Biggest: {top.name} {_fmt(top.value, unit)} ± {top.uncertainty:.3g}; "
               f"then {rest or 'nothing'}. Split by {method}; parts and interaction sum to the gap.")
    clear = len(ranked) < 2 or (top.value * sign - top.uncertainty > max(0.0, ranked[1].value * sign))
    values: dict[str, float | str | None] = {"gap": round(gap.value, 4), "gap_uncertainty": round(gap.uncertainty, 4)}
    for f in figs[1:]:
        values[f.name] = round(f.value, 4)
        values[f"{f.name}_uncertainty"] = round(f.uncertainty, 4)
    evidence = [Evidence("attribution", values, None, note=(
        f"{method}: parts, then interaction = gap - sum(parts); the detail rows (swap_interaction, "
        "baseline_drift, not_reproduced or within_strata, unmatched) sum to the interaction; "
        "± is a 95% half-width (repeat runs where a configuration was repeated, else a bootstrap over "
        "requests)")),
        Evidence("benchmark_metrics", {k: round(v, 4) for k, v in bm.value.items()}, bm.sql),
        Evidence("production_metrics", {k: round(v, 4) for k, v in pm.value.items()}, pm.sql)]
    for cname, c in configs.items():
        evidence.append(Evidence(f"rerun_{cname}", {k: v for k, v in c.items() if k not in ("runs", "sql")},
                                 c["sql"], note=f"run(s) {', '.join(c['runs'])}"))
    if session_sql:
        evidence.append(Evidence("rerun_session", {"configurations": len(configs)}, session_sql))
    for p in PROPERTIES:
        for who, prof in (("benchmark", bench), ("production", prod)):
            vals = {k: v for k, v in prof.figures.get(p, {}).items() if not isinstance(v, list)}
            evidence.append(Evidence(f"{p}_{who}", vals, prof.sql.get(p)))
    actions = [_fix(top.name, prod)] if top.name in TITLES and material else []
    actions += [_fix(f.name, prod) for f in ranked[1:] if f.name in TITLES and f.value * sign > f.uncertainty]
    if top.kind == "interaction" and material:
        actions.append("The interaction is the biggest part: look at its pieces (baseline_drift: the "
                       "target changed since the benchmark; not_reproduced: production differs in what "
                       "the store does not record), or re-run with --attribution shapley.")
    return Finding(f"dilution_{top.name}" if material else "no_dilution", title,
                   0.9 if clear else 0.6, "warning" if material and worse else "info", summary,
                   evidence, actions or ["Nothing to change: the benchmark's traffic stands for production's."])
