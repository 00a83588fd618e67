"""The hardware walk: the slow replica's GPU telemetry (`gpu_samples`) against its peers', in
the runbook's order. Each check compares the replica with the median of its peers, so a
fleet-wide condition (every GPU power-capped the same) is not blamed on one replica.

1. clocks: SM clock below its max, and the clock-event (throttle) reasons set while it is
2. power and thermal: drawing at its power limit, a lower limit than the peers, hotter
3. PCIe: the link trained below its generation or width
4. errors: XID events, uncorrectable ECC errors, growing corrected ECC / PCIe replays
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from playbooks.findings import Evidence
from playbooks.sql import fetch, literal

ORDER = ("clocks", "power_thermal", "pcie", "errors")
# Clock-event reasons that slow a busy GPU (NVML's names, as gpu_samples decodes them);
# gpu_idle, applications_clocks_setting and display_clock_setting are not a slowdown.
THERMAL = ("sw_thermal_slowdown", "hw_thermal_slowdown")
POWER = ("sw_power_cap", "hw_power_brake_slowdown")
SLOWDOWN = (*THERMAL, *POWER, "hw_slowdown", "sync_boost")

CLOCK_DROP = 0.05        # SM clock this far (fraction of max) below the peers' is abnormal
AT_CAP = 0.97            # drawing this share of the power limit: at the cap
LIMIT_DROP = 0.05        # a limit this much lower than the peers'
HOTTER_C = 10.0
REASON_SHARE = 0.2       # a slowdown reason in at least this share of the replica's samples

# Telemetry names its GPU's host as it was scraped: the replica's name (a fleet run's own
# scrape), or its host:port (a Prometheus pull's `instance` label, a dcgm-exporter's port).
# `alias` maps those to the replica; {aliases} is a VALUES list of (instance, replica).
_SAMPLES = """
alias(instance, replica) AS ({aliases}),
g AS (
  SELECT coalesce(a.replica, s.instance) AS replica, s.* EXCLUDE (instance)
  FROM gpu_samples s LEFT JOIN alias a USING (instance)
  WHERE s.run_id = $run_id AND s.instance IS NOT NULL
)"""

# One row per replica: medians under load (samples flagged idle left out where others exist).
SUMMARY_SQL = """
WITH """ + _SAMPLES + """, s AS (
  SELECT *, coalesce(clock_event_names, '') LIKE '%gpu_idle%' AS idle,
         bool_and(coalesce(clock_event_names, '') LIKE '%gpu_idle%') OVER (PARTITION BY replica) AS all_idle
  FROM g
)
SELECT replica AS instance, count(*) AS samples,
       median(sm_clock_mhz) AS sm_clock_mhz, max(sm_clock_max_mhz) AS sm_clock_max_mhz,
       median(sm_clock_mhz / nullif(sm_clock_max_mhz, 0)) AS sm_clock_fraction,
       median(mem_clock_mhz / nullif(mem_clock_max_mhz, 0)) AS mem_clock_fraction,
       median(power_w) AS power_w, median(power_limit_w) AS power_limit_w,
       median(power_w / nullif(power_limit_w, 0)) AS power_fraction,
       median(temperature_c) AS temperature_c, max(temperature_c) AS max_temperature_c,
       min(pcie_gen) AS pcie_gen, max(pcie_gen_max) AS pcie_gen_max,
       min(pcie_width) AS pcie_width, max(pcie_width_max) AS pcie_width_max,
       max(pcie_replays) - min(pcie_replays) AS pcie_replays_added,
       max(coalesce(xid, 0)) AS max_xid,
       string_agg(DISTINCT CAST(xid AS VARCHAR), ',') FILTER (xid > 0) AS xids,
       max(ecc_uncorrected) - min(ecc_uncorrected) AS ecc_uncorrected_added,
       max(ecc_uncorrected) AS ecc_uncorrected,
       max(ecc_corrected) - min(ecc_corrected) AS ecc_corrected_added
FROM s WHERE NOT idle OR all_idle
GROUP BY replica ORDER BY replica
"""

REASONS_SQL = """
WITH """ + _SAMPLES + """
SELECT replica AS instance, reason, count(*) AS samples,
       count(*) / any_value(n) AS share
FROM (SELECT replica, clock_event_names, count(*) OVER (PARTITION BY replica) AS n FROM g),
     unnest(string_split(coalesce(clock_event_names, ''), ',')) AS t(reason)
WHERE reason <> ''
GROUP BY replica, reason ORDER BY replica, samples DESC
"""


@dataclass
class Check:
    name: str              # one of ORDER
    abnormal: bool
    verdict: str | None    # the cause's id when abnormal
    title: str | None
    detail: str            # what was seen, in words
    evidence: Evidence


@dataclass
class Walk:
    replica: str
    has_telemetry: bool
    peers_with_telemetry: int
    checks: list[Check]

    @property
    def cause(self) -> Check | None:
        return next((c for c in self.checks if c.abnormal), None)


def _median(values: list[float | None]) -> float | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    m = len(v) // 2
    return float(v[m]) if len(v) % 2 else float(v[m - 1] + v[m]) / 2.0


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


def _aliases(aliases: dict[str, str] | None) -> str:
    pairs = sorted((aliases or {}).items())
    if not pairs:
        return "SELECT NULL::VARCHAR, NULL::VARCHAR WHERE false"
    return "VALUES " + ", ".join(f"({literal(i)}, {literal(r)})" for i, r in pairs)


def hardware_walk(con: duckdb.DuckDBPyConnection, run_id: str, replica: str, peers: list[str],
                  aliases: dict[str, str] | None = None) -> Walk:
    """`aliases`: other names the replicas' telemetry may carry (host:port) -> replica."""
    alias_sql = _aliases(aliases)
    sql, rows = fetch(con, SUMMARY_SQL.replace("{aliases}", alias_sql), run_id=run_id)
    cols = ("instance", "samples", "sm_clock_mhz", "sm_clock_max_mhz", "sm_clock_fraction",
            "mem_clock_fraction", "power_w", "power_limit_w", "power_fraction", "temperature_c",
            "max_temperature_c", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max",
            "pcie_replays_added", "max_xid", "xids", "ecc_uncorrected_added", "ecc_uncorrected",
            "ecc_corrected_added")
    by = {r[0]: dict(zip(cols, r, strict=True)) for r in rows}
    rsql, rrows = fetch(con, REASONS_SQL.replace("{aliases}", alias_sql), run_id=run_id)
    reasons: dict[str, dict[str, float]] = {}
    for inst, reason, _n, share in rrows:
        reasons.setdefault(inst, {})[reason] = float(share)
    me = by.get(replica)
    peer_rows = [by[p] for p in peers if p in by]
    if me is None:
        return Walk(replica, False, len(peer_rows), [])

    def peer(key: str) -> float | None:
        return _median([p[key] for p in peer_rows])

    checks = [_clocks(me, peer, reasons, replica, peers, sql, rsql), _power(me, peer, sql),
              _pcie(me, peer_rows, sql), _errors(me, peer, sql)]
    return Walk(replica, True, len(peer_rows), checks)


def _slowdown_reasons(reasons: dict[str, dict[str, float]], inst: str) -> dict[str, float]:
    return {k: v for k, v in reasons.get(inst, {}).items() if k in SLOWDOWN}


def _clocks(me: dict, peer, reasons: dict[str, dict[str, float]], replica: str,
            peers: list[str], sql: str, rsql: str) -> Check:
    frac, pfrac = me["sm_clock_fraction"], peer("sm_clock_fraction")
    mine = _slowdown_reasons(reasons, replica)
    theirs: dict[str, float] = {}
    for p in peers:
        for k, v in _slowdown_reasons(reasons, p).items():
            theirs[k] = max(theirs.get(k, 0.0), v)
    own = {k: v for k, v in mine.items() if v >= REASON_SHARE and theirs.get(k, 0.0) < REASON_SHARE / 2}
    low = frac is not None and frac < 1.0 - CLOCK_DROP and (pfrac is None or frac < pfrac - CLOCK_DROP)
    abnormal = low or bool(own)
    kind = ("thermal" if any(k in THERMAL for k in own) else "power" if any(k in POWER for k in own)
            else "other" if own else None)
    ev = Evidence("sm_clocks", {
        "replica_sm_clock_mhz": _r(me["sm_clock_mhz"], 0), "sm_clock_max_mhz": _r(me["sm_clock_max_mhz"], 0),
        "replica_fraction_of_max": _r(frac), "peers_fraction_of_max": _r(pfrac),
        "replica_slowdown_reasons": ",".join(f"{k} ({v:.0%})" for k, v in sorted(mine.items())) or "none",
        "peers_slowdown_reasons": ",".join(f"{k} ({v:.0%})" for k, v in sorted(theirs.items())) or "none"},
        sql + ";\n" + rsql, "medians under load (idle samples left out); reasons: share of samples")
    if not abnormal:
        return Check("clocks", False, None, None, "SM clock at the peers' level, no slowdown reason of its own", ev)
    why = f" ({', '.join(sorted(own))})" if own else " (no clock-event reason reported)"
    mhz = (f"SM clock {me['sm_clock_mhz']:,.0f} of {me['sm_clock_max_mhz']:,.0f} MHz"
           if me["sm_clock_mhz"] is not None and me["sm_clock_max_mhz"] else "SM clock below max")
    verdict = {"thermal": "gpu_thermal_throttle", "power": "gpu_power_throttle"}.get(kind or "", "gpu_clocks_throttled")
    peers_txt = f"; peers at {pfrac:.0%} of max" if pfrac is not None else ""
    return Check("clocks", True, verdict, f"{mhz}{why}", f"{mhz}{why}{peers_txt}", ev)


def _power(me: dict, peer, sql: str) -> Check:
    pf, ppf = me["power_fraction"], peer("power_fraction")
    lim, plim = me["power_limit_w"], peer("power_limit_w")
    temp, ptemp = me["temperature_c"], peer("temperature_c")
    at_cap = pf is not None and pf >= AT_CAP and (ppf is None or ppf < AT_CAP)
    lower_limit = lim is not None and plim is not None and lim < plim * (1 - LIMIT_DROP)
    hotter = temp is not None and ptemp is not None and temp - ptemp >= HOTTER_C
    ev = Evidence("power_thermal", {
        "replica_power_w": _r(me["power_w"], 1), "replica_power_limit_w": _r(lim, 1),
        "peers_power_limit_w": _r(plim, 1), "replica_power_fraction": _r(pf),
        "peers_power_fraction": _r(ppf), "replica_temperature_c": _r(temp, 1),
        "peers_temperature_c": _r(ptemp, 1), "replica_max_temperature_c": _r(me["max_temperature_c"], 1)},
        sql, "medians under load per GPU instance")
    parts = []
    if lower_limit:
        parts.append(f"power limit {lim:,.0f} W vs the peers' {plim:,.0f} W")
    if at_cap:
        parts.append(f"drawing {pf:.0%} of its limit")
    if hotter:
        parts.append(f"{temp:.0f} °C vs the peers' {ptemp:.0f} °C")
    if not parts:
        return Check("power_thermal", False, None, None, "power and temperature at the peers' level", ev)
    verdict = "gpu_power_capped" if (lower_limit or at_cap) else "gpu_running_hot"
    text = "; ".join(parts)
    return Check("power_thermal", True, verdict, text[:1].upper() + text[1:], text, ev)


def _pcie(me: dict, peer_rows: list[dict], sql: str) -> Check:
    gen, gmax, width, wmax = me["pcie_gen"], me["pcie_gen_max"], me["pcie_width"], me["pcie_width_max"]
    pgen = _median([p["pcie_gen"] for p in peer_rows])
    pwidth = _median([p["pcie_width"] for p in peer_rows])
    low_gen = gen is not None and ((gmax is not None and gen < gmax) and (pgen is None or gen < pgen))
    low_width = width is not None and ((wmax is not None and width < wmax) and (pwidth is None or width < pwidth))
    ev = Evidence("pcie_link", {"replica_gen": gen, "gen_max": gmax, "replica_width": width,
                                "width_max": wmax, "peers_gen": _r(pgen, 1), "peers_width": _r(pwidth, 1),
                                "replica_replays_added": me["pcie_replays_added"]},
                  sql, "lowest link state the replica reported during the run vs its maximum")
    if not (low_gen or low_width):
        return Check("pcie", False, None, None, "PCIe link at its maximum generation and width", ev)
    what = f"PCIe link trained at Gen{gen} x{width} (max Gen{gmax} x{wmax})"
    return Check("pcie", True, "pcie_link_degraded", what, what, ev)


def _errors(me: dict, peer, sql: str) -> Check:
    xid = me["max_xid"] or 0
    unc = me["ecc_uncorrected_added"] or 0
    corr, pcorr = me["ecc_corrected_added"] or 0, peer("ecc_corrected_added") or 0
    ev = Evidence("gpu_errors", {"replica_xids": me["xids"] or "none",
                                 "replica_ecc_uncorrected_added": unc,
                                 "replica_ecc_uncorrected_total": me["ecc_uncorrected"],
                                 "replica_ecc_corrected_added": corr, "peers_ecc_corrected_added": pcorr},
                  sql, "XID: the last XID dcgm/NVML reported (0 none); ECC: growth during the run")
    if xid > 0:
        what = f"XID {me['xids']} reported during the run"
        return Check("errors", True, "gpu_xid_error", what, what, ev)
    if unc > 0:
        what = f"{unc:.0f} uncorrectable ECC errors during the run"
        return Check("errors", True, "gpu_ecc_errors", what, what, ev)
    if corr > max(10 * pcorr, 100):
        what = f"{corr:.0f} corrected ECC errors during the run (peers: {pcorr:.0f})"
        return Check("errors", True, "gpu_ecc_errors", what, what, ev)
    return Check("errors", False, None, None, "no XID, no ECC errors beyond the peers'", ev)
