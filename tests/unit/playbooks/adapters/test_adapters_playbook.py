"""The adapters playbook on made runs: the step log's composition (named, with the fix, only
above the share threshold and only when the run asked for more adapters than max_loras),
vLLM's vllm:lora_requests_info (its label sets, values that hold commas), and a run with
neither source (suspected only where TTFT grows with the adapters in flight; a note says what
data would tell). The evidence SQL reruns to the same numbers."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from infbench.store import BatchWriter, ColumnBuffer, create_run
from playbooks.adapters import AdapterOptions, diagnose_adapters
from tests.support.stores import new_store

MS = 1_000_000


def _store(tmp: Path, adapters: list[str | None], ttft_ms: list[float],
           steps: list[tuple[int, int, int]] | None = None,
           info: list[tuple[int, str]] | None = None,
           sends_ms: list[int] | None = None) -> duckdb.DuckDBPyConnection:
    """Requests sent 20 ms apart (or at `sends_ms`), each 300 ms long after its first token;
    `steps`: (adapters in the batch, waiting for a slot, max_loras); `info`: (t_ms, labels)
    of lora_requests_info."""
    con = new_store(tmp / "s.duckdb")
    create_run(con, run_id="r", config={}, target_url="http://127.0.0.1:1", model="m",
               endpoint="completions", t0_monotonic_ns=0)
    w = BatchWriter(con, "r")
    req = ColumnBuffer("requests")
    for i, (a, ttft) in enumerate(zip(adapters, ttft_ms, strict=True)):
        send = (sends_ms[i] if sends_ms else i * 20) * MS
        first = send + int(ttft * MS)
        req.append({"request_idx": i, "label": "x", "phase": "measure", "send_ns": send,
                    "intended_send_ns": send, "first_content_ns": first,
                    "last_choices_ns": first + 300 * MS, "last_chunk_ns": first + 300 * MS,
                    "end_ns": first + 300 * MS, "status_code": 200, "output_tokens": 30,
                    "max_tokens": 30, "adapter": a})
    w.put_buffer(req)
    if steps:
        buf = ColumnBuffer("engine_steps")
        for k, (n, waiting, cap) in enumerate(steps):
            buf.append({"step_id": k, "start_s": k * 0.01, "end_s": k * 0.01 + 0.008,
                        "prefill_tokens": 0, "decode_seqs": 4, "lora_adapters": n,
                        "lora_waiting": waiting, "lora_ms": 0.1 * n, "max_loras": cap})
        w.put_buffer(buf)
    if info:
        buf = ColumnBuffer("metric_samples")
        for t_ms, labels in info:
            buf.append({"t_ns": t_ms * MS, "source": "metrics", "name": "vllm:lora_requests_info",
                        "labels": labels, "value": 1000.0 + t_ms})
            # an older label set still exposed at the same scrape (set earlier: lower value)
            buf.append({"t_ns": t_ms * MS, "source": "metrics", "name": "vllm:lora_requests_info",
                        "labels": 'max_lora="1",waiting_lora_adapters="",running_lora_adapters=""',
                        "value": 1.0})
        w.put_buffer(buf)
    w.close()
    return con


FOUR = ["a", "b", "c", "d"] * 10


@pytest.mark.parametrize(("blocked", "threshold", "named"), [
    (30, 0.05, True), (3, 0.05, False), (3, 0.02, True), (60, 0.05, True), (0, 0.01, False)])
def test_step_log_names_serialization_above_the_threshold(
        tmp_path: Path, blocked: int, threshold: float, named: bool) -> None:
    steps = [(1, 5, 1)] * blocked + [(1, 0, 1)] * (100 - blocked)
    con = _store(tmp_path, FOUR, [50.0] * 40, steps=steps)
    d = diagnose_adapters(con, "r", AdapterOptions(min_blocked_share=threshold))
    assert d.context["blocked_share"] == pytest.approx(blocked / 100)
    if not named:
        assert d.findings == []
        return
    f = d.findings[0]
    assert f.verdict == "adapter_serialization" and f.confidence == 0.9
    assert f.severity == ("critical" if blocked >= 50 else "warning")
    assert "--max-loras 4" in f.next_actions[0]
    comp = f.evidence[0]
    assert con.execute(comp.sql).fetchone()[2] == blocked  # the SQL reruns to the same count


def test_enough_slots_for_every_adapter_is_not_serialization(tmp_path: Path) -> None:
    # Waiting for a slot cannot be the cause when the batch holds as many adapters as asked.
    con = _store(tmp_path, ["a", "b"] * 20, [50.0] * 40, steps=[(2, 3, 2)] * 50)
    assert diagnose_adapters(con, "r").findings == []


def test_vllm_lora_info_is_read_when_there_is_no_step_log(tmp_path: Path) -> None:
    blocked = 'max_lora="2",waiting_lora_adapters="a,c",running_lora_adapters="a,b"'
    fits = 'max_lora="2",waiting_lora_adapters="b",running_lora_adapters="a,b"'
    info = [(t, blocked) for t in range(0, 600, 100)] + [(t, fits) for t in range(600, 1000, 100)]
    # the requests are sent after the scrapes: only the gauge's own labels count here
    con = _store(tmp_path, ["a", "b", "c"] * 10, [40.0] * 30, info=info,
                 sends_ms=[2000 + 20 * i for i in range(30)])
    d = diagnose_adapters(con, "r")
    assert d.data_sources["server_metrics"] and not d.data_sources["engine_steps"]
    f = d.findings[0]
    assert f.verdict == "adapter_serialization" and f.confidence == 0.75
    v = f.evidence[0].values
    assert (v["scrapes"], v["scrapes_at_max_lora"], v["scrapes_with_adapters_waiting_for_a_slot"],
            v["max_lora"], v["adapters_seen_waiting_for_a_slot"]) == (10, 10, 6, 2, 1)
    assert "--max-loras 3" in f.next_actions[0]


def test_requests_vllm_does_not_list_as_waiting_count_from_the_clients_view(tmp_path: Path) -> None:
    # vLLM 0.32 lists a request as waiting only once its first output carried its QUEUED event:
    # one held back by max_loras is missing from waiting_lora_adapters. The clients still wait.
    info = [(t, 'max_lora="1",running_lora_adapters="a",waiting_lora_adapters="a"')
            for t in range(100, 1000, 100)]
    sends = [0, 0, 0, 950, 960, 970]  # b's first two wait 1000 ms for their first token
    con = _store(tmp_path, ["a", "b", "b", "a", "a", "a"], [20.0, 1000.0, 1000.0, 20.0, 20.0, 20.0],
                 info=info, sends_ms=sends)
    f = diagnose_adapters(con, "r").findings[0]
    v = f.evidence[0].values
    assert (v["scrapes_at_max_lora"], v["scrapes_with_adapters_waiting_for_a_slot"]) == (9, 9)
    assert f.verdict == "adapter_serialization" and "--max-loras 2" in f.next_actions[0]
    assert con.execute(f.evidence[0].sql).fetchall()[0][2] == ["b"]  # reruns: b queued at 100 ms


def test_without_composition_ttft_growth_is_only_suspected_and_the_gap_is_said(tmp_path: Path) -> None:
    # 20 requests one at a time (each done before the next: no adapter in flight), then 20
    # sent 5 ms apart (all four adapters in flight): TTFT 30 ms, then `late` ms.
    sends = [1000 * i for i in range(20)] + [30_000 + 5 * i for i in range(20)]
    for late, suspected in ((300.0, True), (45.0, False)):
        (tmp_path / str(late)).mkdir()
        con = _store(tmp_path / str(late), FOUR, [30.0] * 20 + [late] * 20, sends_ms=sends)
        d = diagnose_adapters(con, "r")
        assert any("vllm:lora_requests_info" in n and "cannot be told" in n for n in d.notes)
        if not suspected:
            assert d.findings == []  # grew by 1.5x: under the 2x it takes
            continue
        assert [f.verdict for f in d.findings] == ["adapter_serialization_suspected"]
        f = d.findings[0]
        assert f.confidence < 0.5 and "--max-loras 4" in f.next_actions[1]
        assert f.evidence[0].values["in_flight_0_median_ttft_ms"] == 30.0
        assert f.evidence[0].values["in_flight_3_median_ttft_ms"] == late


def test_no_adapter_no_findings(tmp_path: Path) -> None:
    con = _store(tmp_path, [None] * 10, [30.0] * 10, steps=[(0, 0, 1)] * 10)
    d = diagnose_adapters(con, "r")
    assert d.findings == [] and "named no adapter" in d.context["no_findings"]


def test_bad_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="min-blocked-share"):
        AdapterOptions(min_blocked_share=0.0).validate()
