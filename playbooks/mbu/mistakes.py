"""Which dashboard mistake explains a reported MBU figure.

Each mistake is a wrong input to the same formula (bytes per step / step time / bandwidth);
applied to this run's correct numbers it predicts the figure a dashboard would show. The
reported figure is matched against every prediction, one mistake at a time and then pairs
of one wrong denominator with one wrong numerator (those compound exactly).

| id | the dashboard ... | predicted figure |
| --- | --- | --- |
| `achievable_bandwidth` | divides by an achievable bandwidth (the specs' 80% of datasheet) instead of the datasheet figure | MBU / 0.8 |
| `kv_bytes_forgotten` | counts only the weights | MBU x weight share |
| `tp_not_divided` | counts the whole model's weights on each of TP GPUs | MBU x (TP x W + KV) / (W + KV) |
| `bytes_per_param` | assumes the wrong bytes per parameter (1, 2 or 4) | MBU x (W x assumed / actual + KV) / (W + KV) |
| `tpot_includes_prefill` | takes the step time from TPOT (mixed prefill steps included) or from e2e / output tokens | MBU x decode step time / that time |
| `wrong_batch_size` | computes KV for another batch (1, max_num_seqs, the client's concurrency) | MBU x (W + KV x assumed / actual) / (W + KV) |
| `weights_per_sequence` | charges the weights once per sequence instead of once per step | MBU x (B x W + KV) / (W + KV) |
"""

from __future__ import annotations

from dataclasses import dataclass

TOLERANCE = 0.03  # relative: a match within 3% of a prediction names it


@dataclass(frozen=True)
class Candidate:
    mistake: str          # stable id; "correct" when the figure is the right one
    detail: str           # the wrong input, in words
    predicted: float      # the figure that mistake gives
    kind: str             # numerator | denominator | none

    def error(self, reported: float) -> float:
        return abs(reported - self.predicted) / self.predicted if self.predicted > 0 else float("inf")


@dataclass(frozen=True)
class RunFacts:
    mbu: float
    weight_share: float
    tp: int
    bytes_per_param: float
    achievable_fraction: float
    decode_step_s: float
    tpot_s: float | None          # mean TPOT of the run's requests
    e2e_per_token_s: float | None  # mean e2e / output tokens
    mean_batch: float
    max_num_seqs: int | None
    concurrency: int | None


def candidates(f: RunFacts) -> list[Candidate]:
    m, w = f.mbu, f.weight_share
    kv = 1.0 - w
    out = [Candidate("correct", "bytes per decode step (weights per GPU + KV for the actual "
                     "contexts) / decode step time / datasheet bandwidth", m, "none"),
           Candidate("achievable_bandwidth", f"divided by {f.achievable_fraction:.0%} of the "
                     "datasheet bandwidth (an 'achievable' figure) instead of the datasheet",
                     m / f.achievable_fraction, "denominator")]
    if kv > 0.005:
        out.append(Candidate("kv_bytes_forgotten", "counted the weights only, no KV cache reads",
                             m * w, "numerator"))
    if f.tp > 1:
        out.append(Candidate("tp_not_divided", f"counted the whole model's weights on each of "
                             f"{f.tp} tensor-parallel GPUs", m * (f.tp * w + kv), "numerator"))
    for b in (1.0, 2.0, 4.0):
        if b != f.bytes_per_param:
            out.append(Candidate("bytes_per_param", f"assumed {b:g} bytes per parameter (the "
                                 f"weights are {f.bytes_per_param:g})",
                                 m * (w * b / f.bytes_per_param + kv), "numerator"))
    for name, t in (("TPOT", f.tpot_s), ("e2e / output tokens", f.e2e_per_token_s)):
        if t and t > 0 and abs(t / f.decode_step_s - 1) > 0.01:
            out.append(Candidate("tpot_includes_prefill", f"took the step time from {name} "
                                 f"({t * 1e3:.2f} ms, prefill included) instead of the decode "
                                 f"step time ({f.decode_step_s * 1e3:.2f} ms)",
                                 m * f.decode_step_s / t, "denominator"))
    for label, batch in (("1", 1), ("max_num_seqs", f.max_num_seqs),
                         ("the client's concurrency", f.concurrency)):
        if batch and kv > 0.005 and abs(batch / f.mean_batch - 1) > 0.05:
            out.append(Candidate("wrong_batch_size", f"computed KV for a batch of {batch} ({label}) "
                                 f"instead of the mean decode batch {f.mean_batch:.1f}",
                                 m * (w + kv * batch / f.mean_batch), "numerator"))
    if f.mean_batch > 1.05:
        out.append(Candidate("weights_per_sequence", f"charged the weights once per sequence "
                             f"({f.mean_batch:.1f} per step) instead of once per step",
                             m * (f.mean_batch * w + kv), "numerator"))
    return out


def classify(reported: float, f: RunFacts) -> list[tuple[Candidate, float]]:
    """Candidates within tolerance of `reported`, best first; pairs only when no single one
    matches. Empty when nothing explains the figure."""
    singles = candidates(f)
    hits = sorted(((c, c.error(reported)) for c in singles), key=lambda x: x[1])
    found = [(c, e) for c, e in hits if e <= TOLERANCE]
    if found:
        return found
    pairs = []
    for a in (c for c in singles if c.kind == "denominator"):
        for b in (c for c in singles if c.kind == "numerator"):
            pred = a.predicted * b.predicted / f.mbu
            pc = Candidate(f"{a.mistake}+{b.mistake}", f"{a.detail}; and {b.detail}", pred, "pair")
            pairs.append((pc, pc.error(reported)))
    return sorted([p for p in pairs if p[1] <= TOLERANCE], key=lambda x: x[1])


def nearest(reported: float, f: RunFacts) -> tuple[Candidate, float]:
    return min(((c, c.error(reported)) for c in candidates(f)), key=lambda x: x[1])
