"""The specdec playbook on stores written row by row from a simulated drafter whose every
step is known: acceptance from the counters against the steps' truth, counter restarts,
Prometheus pulls, the clients' view with EOS, and the crossover against a baseline."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from infbench.store import create_run
from playbooks.specdec import SpecdecOptions, diagnose_specdec
from playbooks.specdec.speedup import bucket_of
from tests.support import stores

P = "vllm:spec_decode_"


def new_store(tmp_path: Path, runs: tuple[str, ...] = ("r",)) -> duckdb.DuckDBPyConnection:
    con = stores.new_store(tmp_path / "s.duckdb")
    for run in runs:
        create_run(con, run_id=run, config={"workload": {"workload": "synthetic"}},
                   target_url="http://127.0.0.1:1", model="m", endpoint="completions",
                   t0_monotonic_ns=0)
    return con


def samples(con: duckdb.DuckDBPyConnection, rows: list[tuple[str, int, str, float]]) -> None:
    """(run_id, t_ns, name, value) rows of the engine's /metrics, unlabelled."""
    stores.insert_rows(con, "metric_samples", [
        {"run_id": run, "t_ns": t, "source": "metrics", "name": name, "labels": "", "value": float(v)}
        for run, t, name, v in rows])


class Drafter:
    """Counters of one engine process: each drafted step accepts a geometric prefix."""

    def __init__(self, k: int, alpha: float, rng: np.random.Generator) -> None:
        self.k, self.alpha, self.rng = k, alpha, rng
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos = [0] * k

    def steps(self, n: int) -> None:
        for _ in range(n):
            drafted = int(self.rng.integers(1, self.k + 1))  # fewer drafts near a sequence's end
            a = 0
            while a < drafted and self.rng.random() < self.alpha:
                a += 1
            self.drafts += 1
            self.draft_tokens += drafted
            self.accepted += a
            for i in range(a):
                self.per_pos[i] += 1

    def snapshot(self, con, run: str, t_s: float, source: str = "metrics",
                 suffix: str = "_total") -> None:
        label = 'model_name="m"'
        rows = [(P + "num_drafts" + suffix, label, self.drafts),
                (P + "num_draft_tokens" + suffix, label, self.draft_tokens),
                (P + "num_accepted_tokens" + suffix, label, self.accepted)]
        rows += [(P + "num_accepted_tokens_per_pos" + suffix, f'{label},position="{i}"', n)
                 for i, n in enumerate(self.per_pos)]
        stores.insert_rows(con, "metric_samples", [
            {"run_id": run, "t_ns": int(t_s * 1e9), "source": source, "name": n, "labels": lab,
             "value": float(v)} for n, lab, v in rows])


def acceptance(d) -> dict:
    f = next(f for f in d.findings if f.verdict in ("spec_acceptance", "spec_low_acceptance"))
    return next(e.values for e in f.evidence if e.name == "spec_decode_counters")


@pytest.mark.parametrize("k,alpha,seed", [(3, 0.62, 1), (6, 0.83, 7)])
def test_acceptance_from_scrapes_equals_the_drafters_truth(tmp_path: Path, k: int, alpha: float,
                                                           seed: int) -> None:
    con = new_store(tmp_path)
    d = Drafter(k, alpha, np.random.default_rng(seed))
    for i in range(30):
        d.snapshot(con, "r", 0.5 * i)
        d.steps(400)
    d.snapshot(con, "r", 15.0)
    v = acceptance(diagnose_specdec(con, "r"))
    assert v["acceptance_rate"] == pytest.approx(d.accepted / d.draft_tokens, abs=1e-4)
    assert v["mean_accepted_length"] == pytest.approx(1 + d.accepted / d.drafts, abs=1e-4)
    assert v["num_speculative_tokens"] == k and v["drafts"] == d.drafts


@pytest.mark.parametrize("restart_at,k", [(11, 4), (23, 2)])
def test_a_restart_inside_the_window_is_left_out_and_said(tmp_path: Path, restart_at: int,
                                                          k: int) -> None:
    # Two engine processes; truth is what both counted. The interval holding the restart
    # (the old process's last steps and the new one's first) is unseen and left out.
    con = new_store(tmp_path)
    rng = np.random.default_rng(restart_at)
    old, new = Drafter(k, 0.71, rng), Drafter(k, 0.71, rng)
    for i in range(restart_at):
        old.snapshot(con, "r", 0.5 * i)
        old.steps(500)
    for i in range(restart_at, 40):
        new.steps(500)
        new.snapshot(con, "r", 0.5 * i)
    truth = (old.accepted + new.accepted) / (old.draft_tokens + new.draft_tokens)
    diag = diagnose_specdec(con, "r")
    v = acceptance(diag)
    assert v["acceptance_rate"] == pytest.approx(truth, rel=0.01)
    (reset,) = [f for f in diag.findings if f.verdict == "spec_counter_reset"]
    assert reset.scope["windows_s"] == [[0.5 * (restart_at - 1), 0.5 * restart_at]]
    assert v["intervals_kept"] == 38
    assert all(e.sql and "metric_samples" in e.sql for e in reset.evidence)


def test_prometheus_pulls_are_read_when_the_run_has_no_scrapes(tmp_path: Path) -> None:
    con = new_store(tmp_path)
    d = Drafter(5, 0.4, np.random.default_rng(3))
    for i in range(12):
        d.steps(300)
        d.snapshot(con, "r", 15.0 * i, source="prometheus")
    diag = diagnose_specdec(con, "r")
    assert diag.context["source"] == "prometheus"
    assert acceptance(diag)["acceptance_rate"] == pytest.approx(
        (d.accepted - 0) / d.draft_tokens, rel=0.02)


def test_low_acceptance_and_a_steep_position_are_named(tmp_path: Path) -> None:
    con = new_store(tmp_path)
    d = Drafter(4, 0.15, np.random.default_rng(5))
    for i in range(10):
        d.snapshot(con, "r", float(i))
        d.steps(800)
    diag = diagnose_specdec(con, "r")
    (f,) = diag.findings
    assert f.verdict == "spec_low_acceptance" and f.severity == "warning"
    pos = next(e.values for e in f.evidence if e.name == "acceptance_per_position")
    assert pos["given_previous_0"] == pytest.approx(0.15, abs=0.03)


def test_a_run_without_counters_has_no_findings(tmp_path: Path) -> None:
    con = new_store(tmp_path)
    con.execute("INSERT INTO metric_samples (run_id, t_ns, source, name, labels, value) "
                "VALUES ('r', 0, 'metrics', 'vllm:num_requests_running', '', 3)")
    diag = diagnose_specdec(con, "r")
    assert diag.findings == [] and "did not speculate" in diag.context["no_findings"]


def test_client_view_leaves_out_requests_cut_at_eos(tmp_path: Path) -> None:
    con = new_store(tmp_path)
    d = Drafter(3, 0.7, np.random.default_rng(2))
    for i in range(5):
        d.snapshot(con, "r", float(i))
        d.steps(100)
    # length-stopped: 41 tokens in 17 events (16 decode steps of 2.5 tokens); EOS-stopped
    # ones would pull the estimate down (their last step cut, EOS counted or not)
    rows = [(0, 41, 17, "length"), (1, 21, 9, "length"), (2, 9, 8, "stop"), (3, 5, 5, "stop")]
    for idx, out, events, reason in rows:
        con.execute("INSERT INTO requests (run_id, request_idx, phase, send_ns, output_tokens, "
                    "num_content_chunks, finish_reason) VALUES ('r', ?, 'measure', 0, ?, ?, ?)",
                    [idx, out, events, reason])
    f = diagnose_specdec(con, "r").findings[0]
    c = next(e.values for e in f.evidence if e.name == "client_tokens_per_step")
    assert c["tokens_per_step"] == pytest.approx((40 + 20) / (16 + 8), abs=1e-4)
    assert c["requests_used"] == 2 and c["stopped_at_eos_left_out"] == 2


def load_series(con, run: str, tok_s, batches: list[int], dt: float = 0.25,
                reps: int = 6, restart_after: int | None = None) -> None:
    """Scrapes of a run draining through `batches`, each held for reps intervals."""
    t, gen, rows = 0.0, 0.0, []
    n = 0
    for b in batches:
        for _ in range(reps):
            rows.append((run, int(t * 1e9), "vllm:num_requests_running", b))
            rows.append((run, int(t * 1e9), "vllm:generation_tokens_total", gen))
            t += dt
            gen += tok_s(b) * dt
            n += 1
            if restart_after is not None and n == restart_after:
                gen = 3.0
    samples(con, rows)


@pytest.mark.parametrize("crossover", [24, 90])
def test_the_batch_size_where_speculation_stops_paying(tmp_path: Path, crossover: int) -> None:
    con = new_store(tmp_path, ("spec", "base"))
    d = Drafter(4, 0.7, np.random.default_rng(4))
    for i in range(5):
        d.snapshot(con, "spec", float(i))
        d.steps(50)
    batches = [200, 150, 100, 70, 40, 20, 12, 6, 3, 1]
    base = lambda b: 40.0 * b  # noqa: E731
    # speed-up falls linearly in log2(batch) and crosses 1 at `crossover`
    spec = lambda b: base(b) * (1.0 - 0.4 * np.log2(b / crossover))  # noqa: E731
    load_series(con, "spec", spec, batches, restart_after=30)
    load_series(con, "base", base, batches)
    diag = diagnose_specdec(con, "spec", SpecdecOptions(baseline="base"))
    (f,) = [f for f in diag.findings if f.verdict == "spec_costs_throughput"]
    # the first bucket whose batches all lie above the crossover, or the one holding it
    assert abs(f.scope["batch_size_from"].bit_length() - bucket_of(crossover).bit_length()) <= 1
    assert all(e.sql for e in f.evidence)


def test_a_baseline_that_speculated_is_refused(tmp_path: Path) -> None:
    con = new_store(tmp_path, ("a", "b"))
    for run in ("a", "b"):
        d = Drafter(2, 0.5, np.random.default_rng(1))
        for i in range(3):
            d.snapshot(con, run, float(i))
            d.steps(10)
    with pytest.raises(ValueError, match="baseline: run b drafted tokens too"):
        diagnose_specdec(con, "a", SpecdecOptions(baseline="b"))


def test_intervals_overlapping_a_prefill_are_left_out(tmp_path: Path) -> None:
    # 40 requests held in prefill for the first 2 s (the batch reads 40 while nothing decodes),
    # then decoding at 40 * 30 tok/s: only the decode intervals count.
    from playbooks.specdec.speedup import throughput_by_batch

    con = new_store(tmp_path)
    rows, gen = [], 0.0
    for i in range(30):
        t = 0.25 * i
        rows += [("r", int(t * 1e9), "vllm:num_requests_running", 40.0),
                 ("r", int(t * 1e9), "vllm:generation_tokens_total", gen)]
        if t >= 2.0:
            gen += 40 * 30 * 0.25
    samples(con, rows)
    stores.insert_rows(con, "requests", [
        {"run_id": "r", "request_idx": i, "phase": "measure", "send_ns": int(0.01 * i * 1e9),
         "first_content_ns": int(2.0e9 + 0.001 * i * 1e9)} for i in range(40)])
    t = throughput_by_batch(con, "r", "metrics")
    assert t.buckets[32].tokens_per_s == pytest.approx(1200.0, rel=1e-6)
    assert t.prefill_intervals == 9


def test_the_triage_runs_it_only_where_the_engine_speculated(tmp_path: Path) -> None:
    from playbooks.triage.inventory import take_inventory

    con = new_store(tmp_path, ("plain", "spec"))
    con.execute("INSERT INTO metric_samples (run_id, t_ns, source, name, labels, value) "
                "VALUES ('plain', 0, 'metrics', 'vllm:num_requests_running', '', 3)")
    d = Drafter(2, 0.5, np.random.default_rng(8))
    d.snapshot(con, "spec", 0.0)
    assert "specdec" in take_inventory(con, "spec", {}, "m").run
    skipped = take_inventory(con, "plain", {}, "m").skipped
    assert skipped["specdec"] == "no speculative decoding counters (the engine did not speculate)"


def test_vllms_created_series_and_engine_label_are_read_as_vllm_writes_them(tmp_path: Path) -> None:
    # vLLM 0.32 writes each counter with an engine label and a `_created` gauge beside it
    # (prometheus_client's): the timestamps must not be read as counts.
    con = new_store(tmp_path)
    rows = []
    for i, (drafts, tokens, accepted, pos) in enumerate([(0, 0, 0, (0, 0)), (10, 20, 13, (8, 5)),
                                                         (30, 60, 33, (20, 13))]):
        t, lab = int(i * 1e9), 'engine="0",model_name="tiny-llama"'
        for name, v in (("num_drafts", drafts), ("num_draft_tokens", tokens),
                        ("num_accepted_tokens", accepted)):
            rows += [("r", t, "metrics", f"{P}{name}_total", lab, float(v)),
                     ("r", t, "metrics", f"{P}{name}_created", lab, 1.79e9)]
        rows += [("r", t, "metrics", f"{P}num_accepted_tokens_per_pos_total",
                  f'{lab},position="{p}"', float(n)) for p, n in enumerate(pos)]
    stores.insert_rows(con, "metric_samples", [
        dict(zip(("run_id", "t_ns", "source", "name", "labels", "value"), r, strict=True)) for r in rows])
    v = acceptance(diagnose_specdec(con, "r"))
    assert (v["drafts"], v["draft_tokens"], v["accepted_tokens"]) == (30, 60, 33)
    assert v["acceptance_rate"] == pytest.approx(0.55) and v["num_speculative_tokens"] == 2
