"""Whether two runs measured the same thing, and whether their requests pair up.

The load (workload, arrivals, endpoint, model, sampling) must be the same; the engine under
test may differ (that is the point). Stop conditions and seeds may differ too: a short canary
against a long baseline is a fair, if unpaired, comparison of the same load.

Two runs with the same `workload_fingerprint` sent the same requests in the same order
(request k of one is request k of the other: same intended send time, input length and
max_tokens), so the gate compares them request by request, which cancels the workload's own
length mix out of the change. Keys follow the fingerprint's: `(request_idx, 0)` for single
requests, `(conversation_id, turn)` for conversations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from infbench.gate.samples import RunSamples

# Config paths that define the load.
WORKLOAD_KEYS = (
    ("workload",),
    ("arrivals",),
    ("target", "endpoint"),
    ("target", "model"),
    ("sampling", "temperature"),
    ("sampling", "ignore_eos"),
    ("warmup_s",),
)
# Below this share of requests completed in both runs, pairing would compare a selection.
MIN_PAIRED_SHARE = 0.9


def _get(cfg: dict[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = cfg
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def _flat(prefix: str, v: Any) -> dict[str, Any]:
    if isinstance(v, dict):
        out: dict[str, Any] = {}
        for k, sub in v.items():
            out.update(_flat(f"{prefix}.{k}", sub))
        return out
    return {prefix: v}


def workload_differences(base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """One line per differing field, e.g. `arrivals.concurrency: 8 -> 16`."""
    diffs = []
    for path in WORKLOAD_KEYS:
        name = ".".join(path)
        a, b = _flat(name, _get(base, path)), _flat(name, _get(cand, path))
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                diffs.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    return diffs


def _fixed_requests(cfg: dict[str, Any]) -> bool:
    """The run's stop condition fixes which requests it sends (a request count, no time limit)."""
    stop = cfg.get("stop") or {}
    return stop.get("num_requests") is not None and stop.get("duration_s") is None


@dataclass(frozen=True)
class Comparison:
    differences: list[str]  # the load differs: refused unless allowed
    same_requests: bool  # equal fingerprints: the requests pair by key
    note: str  # why they do not pair, when they do not


def is_imported(s: RunSamples) -> bool:
    """A run read from another tool's file (`infbench import --from`)."""
    return isinstance(s.config.get("imported"), dict)


# Scheduled sends of paired requests may differ by this much and still be one schedule: the
# tools stamp the moment a request was released, which jitters by a timer tick.
SCHEDULE_TOLERANCE_S = 0.005


def _schedule(s: RunSamples) -> np.ndarray:
    # Samples built without a schedule (older callers) have none: NaN for every request.
    return s.scheduled_s if s.scheduled_s.size == s.n_requests else np.full(s.n_requests, np.nan)


def _imported_comparison(base: RunSamples, cand: RunSamples) -> Comparison:
    """An imported run has no infbench workload config to compare: the requests themselves
    are the workload. Requests that completed in both runs (same position in each) must have
    asked for and produced the same lengths, and, where both files have a schedule, been
    scheduled at the same offsets; otherwise the runs measured different loads."""
    common, rb, rc = np.intersect1d(request_keys(base), request_keys(cand), return_indices=True)
    if common.size == 0:
        return Comparison(["no request completed in both runs"], False, "")
    diffs = []
    for name, a, b in (("input tokens", base.prompt_tokens, cand.prompt_tokens),
                       ("output tokens", base.output_tokens, cand.output_tokens)):
        bad = np.flatnonzero(a[rb] != b[rc])
        if bad.size:
            i = int(bad[0])
            diffs.append(f"{name} differ in {bad.size} of {common.size} requests (request "
                         f"{int(base.request_idx[rb[i]])}: {a[rb[i]]:g} -> {b[rc[i]]:g})")
    sa, sb = _schedule(base)[rb], _schedule(cand)[rc]
    both = np.isfinite(sa) & np.isfinite(sb)
    if both.any():
        off = np.abs((sa[both] - sa[both].min()) - (sb[both] - sb[both].min()))
        if off.max() > SCHEDULE_TOLERANCE_S:
            diffs.append(f"schedules differ: scheduled offsets up to {off.max() * 1e3:.1f} ms apart "
                         f"(> {SCHEDULE_TOLERANCE_S * 1e3:g} ms)")
    return Comparison(diffs, not diffs, "" if not diffs else "the runs sent different requests")


def compare_runs(base: RunSamples, cand: RunSamples) -> Comparison:
    if is_imported(base) or is_imported(cand):
        return _imported_comparison(base, cand)
    diffs = workload_differences(base.config, cand.config)
    fb, fc = base.fingerprint, cand.fingerprint
    if fb is None or fc is None:
        missing = base if fb is None else cand
        return Comparison(diffs, False, f"run {missing.run.run_id} has no workload fingerprint "
                                        "(recorded by an older infbench): requests compared unpaired")
    if fb == fc:
        return Comparison(diffs, True, "")
    same_draw = (base.config.get("seed") == cand.config.get("seed")
                 and base.config.get("stop") == cand.config.get("stop") and _fixed_requests(base.config))
    if not diffs and same_draw:
        # Same configuration, seed and request count, yet different requests: the workload's
        # inputs changed underneath (a trace or dataset file, how lengths are drawn).
        diffs = [f"workload_fingerprint: {fb!r} -> {fc!r} (same configuration, seed and request "
                 "count, yet different requests)"]
    return Comparison(diffs, False, "the runs sent different requests (workload fingerprints differ: "
                                    "another seed or request count, or a run stopped by time); "
                                    "compared unpaired, so the workload's own spread widens every "
                                    "interval (--num-requests and --seed alike pair them)")


def request_keys(s: RunSamples) -> np.ndarray:
    """The fingerprint's key of each request as one integer (session << 20 | turn, and a flag
    bit for conversations)."""
    conv = s.conversation_id
    single = conv < 0
    return np.where(single, s.request_idx << 20, (1 << 62) | (conv << 20) | s.turn)


@dataclass(frozen=True)
class Pairing:
    """Requests present in both runs: `base_rows[i]` and `cand_rows[i]` index the same request
    in each run's per-request arrays."""

    base_rows: np.ndarray
    cand_rows: np.ndarray

    @property
    def n(self) -> int:
        return int(self.base_rows.size)


def pair_requests(base: RunSamples, cand: RunSamples, min_requests: int) -> tuple[Pairing | None, str]:
    """The pairing of two runs that sent the same requests, or None and why not."""
    common, rb, rc = np.intersect1d(request_keys(base), request_keys(cand), return_indices=True)
    share = common.size / max(base.n_requests, cand.n_requests, 1)
    if common.size < min_requests or share < MIN_PAIRED_SHARE:
        return None, (f"only {common.size} requests completed in both runs ({share:.0%}): "
                      f"compared unpaired")
    return Pairing(rb, rc), ""
