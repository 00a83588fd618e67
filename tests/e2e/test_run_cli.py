"""`infbench run` end to end against the known-schedule test server: every workload and
arrival kind, preflight failures, errors and malformed streams, secrets, interruption."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.cli import ROOT, cli_env, infbench
from tests.support.process import sse_server
from tests.support.store_rows import store_rows

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server() -> str:
    with sse_server("--ttft-ms", "5", "--itl-ms", "1") as url:
        yield url


def _run_json(url: str, db: Path, *args: str) -> dict:
    r = infbench("run", "--url", url, "--db", str(db), "--json", "--quiet", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    ("arrival", "extra"),
    [
        ("closed", ["--concurrency", "4", "--num-requests", "12"]),
        ("constant", ["--rate", "40", "--num-requests", "12"]),
        ("poisson", ["--rate", "40", "--num-requests", "12"]),
        ("gamma", ["--rate", "40", "--burstiness", "0.5", "--num-requests", "12"]),
    ],
)
def test_arrival_kinds(server: str, tmp_path: Path, arrival: str, extra: list[str]) -> None:
    s = _run_json(server, tmp_path / "a.duckdb", "--arrival", arrival, "--output-tokens", "8", *extra)
    assert s["completed"] == 12 and s["failed"] == 0
    assert s["mean_ttft_ms"] >= 5.0  # the server waits 5 ms before the first token
    assert s["output_tokens_source"] == {"usage": 12, "counted": 0}
    cfg = json.loads(store_rows(tmp_path / "a.duckdb", "SELECT config FROM runs")[0][0])
    assert cfg["arrivals"]["kind"] == arrival


def test_constant_rate_is_kept(server: str, tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    _run_json(server, db, "--arrival", "constant", "--rate", "20", "--num-requests", "10", "--output-tokens", "4")
    sends = [r[0] for r in store_rows(db, "SELECT intended_send_ns FROM requests ORDER BY request_idx")]
    gaps = {round((b - a) / 1e6) for a, b in zip(sends, sends[1:], strict=False)}
    assert gaps == {50}


@pytest.mark.parametrize(
    ("workload", "extra", "labels"),
    [
        ("synthetic", ["--input-tokens", "normal:100:20"], {"synthetic"}),
        ("prefix", ["--prefix-groups", "2", "--prefix-tokens", "64", "--input-tokens", "16"], {"group-0", "group-1"}),
        ("structured", [], {"event", "order", "person"}),
    ],
)
def test_synthetic_workloads(server: str, tmp_path: Path, workload: str, extra: list[str], labels: set[str]) -> None:
    db = tmp_path / "w.duckdb"
    s = _run_json(server, db, "--workload", workload, "--arrival", "closed", "--concurrency", "4",
                  "--num-requests", "24", "--output-tokens", "6", *extra)
    assert s["completed"] == 24
    assert set(s["by_label"]) <= labels and len(s["by_label"]) >= min(2, len(labels))


def test_multiturn_history_grows(server: str, tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    s = _run_json(server, db, "--workload", "multiturn", "--turns", "3", "--endpoint", "chat",
                  "--arrival", "closed", "--concurrency", "2", "--num-requests", "6",
                  "--input-tokens", "20", "--output-tokens", "5")
    assert s["completed"] == 6
    rows = store_rows(db, "SELECT conversation_id, turn, prompt_tokens FROM requests ORDER BY conversation_id, turn")
    by_conv: dict[int, list[int]] = {}
    for conv, turn, ptoks in rows:
        by_conv.setdefault(conv, []).append(ptoks)
        assert turn == len(by_conv[conv]) - 1
    for toks in by_conv.values():
        assert toks == sorted(toks) and len(set(toks)) == len(toks)


def test_sharegpt_dataset(server: str, tmp_path: Path) -> None:
    data = [{"conversations": [{"from": "human", "value": f"question {i} " * 5},
                               {"from": "gpt", "value": "answer " * (3 + i)}]} for i in range(5)]
    data.append({"conversations": [{"from": "gpt", "value": "skipped"}]})
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    db = tmp_path / "s.duckdb"
    s = _run_json(server, db, "--workload", "sharegpt", "--dataset", str(path), "--arrival", "closed",
                  "--num-requests", "5")
    assert s["completed"] == 5
    assert sorted(r[0] for r in store_rows(db, "SELECT max_tokens FROM requests")) == sorted(
        {r[0] for r in store_rows(db, "SELECT max_tokens FROM requests")})


def test_azure_trace_replay_with_time_scale(server: str, tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,120,5\n2023-11-16 18:15:46.8805900,300,7\n"
                    "2023-11-16 18:15:47.2805900,80,3\n2023-11-16 18:15:49.0000000,50,3\n")
    db = tmp_path / "t.duckdb"
    s = _run_json(server, db, "--workload", "trace", "--trace", str(path), "--time-scale", "0.5",
                  "--trace-end", "1.0")
    assert s["completed"] == 3  # the fourth row is outside the slice
    rows = store_rows(db, "SELECT intended_send_ns, max_tokens FROM requests ORDER BY request_idx")
    assert [r[1] for r in rows] == [5, 7, 3]
    assert [round(r[0] / 1e6) for r in rows] == [0, 100, 300]


def test_mooncake_trace_replay(server: str, tmp_path: Path) -> None:
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"timestamp": 0, "input_length": 700, "output_length": 4, "hash_ids": [1, 2]},
        {"timestamp": 50, "input_length": 600, "output_length": 4, "hash_ids": [1, 3]},
    ]) + "\n")
    db = tmp_path / "mc.duckdb"
    s = _run_json(server, db, "--workload", "trace", "--trace", str(path))
    assert s["completed"] == 2
    assert [round(r[0] / 1e6) for r in store_rows(db, "SELECT intended_send_ns FROM requests ORDER BY 1")] == [0, 50]


def test_warmup_and_cooldown_are_stored_but_excluded(server: str, tmp_path: Path) -> None:
    db = tmp_path / "wc.duckdb"
    s = _run_json(server, db, "--arrival", "constant", "--rate", "20", "--duration", "2",
                  "--warmup", "0.5", "--cooldown", "0.5", "--output-tokens", "4")
    phases = dict(store_rows(db, "SELECT phase, count(*) FROM requests GROUP BY 1"))
    assert phases["warmup"] == 10 and phases["cooldown"] >= 9
    assert s["num_prompts"] == phases["measure"]
    assert s["excluded_warmup_cooldown"] == phases["warmup"] + phases["cooldown"]


def test_unreachable_url_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "never.duckdb"
    r = infbench("run", "--url", "http://127.0.0.1:9", "--db", str(db))
    assert r.returncode == 2
    assert "cannot reach" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not db.exists()


def test_wrong_key_and_unknown_model_exit_2(tmp_path: Path) -> None:
    with sse_server("--api-key", "right-key") as url:
        r = infbench("run", "--url", url, "--db", str(tmp_path / "x.duckdb"), OPENAI_API_KEY="wrong-key")
        assert r.returncode == 2 and "API key" in r.stderr
        r = infbench("run", "--url", url, "--db", str(tmp_path / "x.duckdb"), "--model", "nope",
                     OPENAI_API_KEY="right-key")
        assert r.returncode == 2 and "nope" in r.stderr and "test-model" in r.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_bad_option_is_one_line_naming_the_field(tmp_path: Path) -> None:
    r = infbench("run", "--url", "http://127.0.0.1:9", "--input-tokens", "banana:1", "--db", str(tmp_path / "x"))
    assert r.returncode == 2 and "input_tokens" in r.stderr


def test_api_key_is_never_stored_or_printed(tmp_path: Path) -> None:
    secret = "sk-infbench-secret-4711"
    db = tmp_path / "k.duckdb"
    with sse_server("--api-key", secret, "--faults", "http500:3") as url:
        r = infbench("run", "--url", url, "--db", str(db), "--num-requests", "9", "--arrival", "closed",
                     "--output-tokens", "4", OPENAI_API_KEY=secret)
        assert r.returncode == 1, r.stderr  # every third request fails: not a clean run
        assert secret not in r.stdout + r.stderr
        for args in (["runs"], ["show", "last", "--json"], ["report", "last", "--html", str(tmp_path / "r.html")]):
            out = infbench(*args, "--db", str(db))
            assert out.returncode == 0 and secret not in out.stdout + out.stderr
        exp = infbench("export", "last", "--db", str(db), "--format", "csv", "--out", str(tmp_path / "exp"))
        assert exp.returncode == 0
    blobs = [db.read_bytes(), (tmp_path / "r.html").read_bytes()]
    blobs += [p.read_bytes() for p in (tmp_path / "exp").iterdir()]
    for blob in blobs:
        assert secret.encode() not in blob
    assert json.loads(store_rows(db, "SELECT config FROM runs")[0][0])["target"]["api_key_set"] is True


def test_errors_and_malformed_streams_are_classified_and_the_run_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    faults = "http500:5,malformed:7,truncate:11,badutf8:13,reset:17,error_event:19,http429:23,hang:29"
    with sse_server("--faults", faults) as url:
        r = infbench("run", "--url", url, "--db", str(db), "--json", "--quiet", "--arrival", "closed",
                     "--concurrency", "4", "--num-requests", "60", "--output-tokens", "8", "--timeout", "1.5")
    assert r.returncode == 1, r.stderr
    s = json.loads(r.stdout)
    assert s["status"] == "completed_with_errors"
    status, reason = store_rows(db, "SELECT status, status_reason FROM runs")[0]
    assert status == "completed_with_errors"
    assert f"{s['failed']} of 60 requests failed" in reason
    assert all(f"{n} {k}" in reason for k, n in s["errors"].items())
    assert {"http_500", "malformed_sse", "truncated_sse", "invalid_utf8", "connection_reset",
            "server_error", "http_429", "timeout"} <= set(s["errors"])
    assert s["completed"] + s["failed"] == 60 and s["completed"] >= 15
    msgs = store_rows(db, "SELECT error_class, error_message FROM requests WHERE error_class IS NOT NULL")
    assert all(m for _, m in msgs)


@pytest.mark.parametrize(("every", "max_rate", "code"), [(4, 0.4, 0), (4, 0.1, 1), (6, 0.2, 0), (6, 0.0, 1)])
def test_max_error_rate_decides_the_exit_code_not_the_status(
        tmp_path: Path, every: int, max_rate: float, code: int) -> None:
    db = tmp_path / "m.duckdb"
    with sse_server("--faults", f"http500:{every}") as url:
        r = infbench("run", "--url", url, "--db", str(db), "--json", "--quiet", "--arrival", "closed",
                     "--concurrency", "2", "--num-requests", "24", "--output-tokens", "4",
                     "--max-error-rate", str(max_rate))
    assert r.returncode == code, r.stderr
    s = json.loads(r.stdout)
    rate = s["errors"]["http_500"] / 24
    assert abs(rate - 1 / every) <= 1 / 24 and s["error_rate"] == rate
    assert store_rows(db, "SELECT status FROM runs")[0][0] == "completed_with_errors"


def test_bad_max_error_rate_is_one_line_and_exit_2(tmp_path: Path) -> None:
    r = infbench("run", "--url", "http://127.0.0.1:9", "--db", str(tmp_path / "x.duckdb"),
                 "--max-error-rate", "1.5")
    assert r.returncode == 2 and "max_error_rate" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "x.duckdb").exists()


def _server_counts(url: str) -> tuple[float, float]:
    """(requests completed, requests mid-stream: sent 3 or more of their tokens, not yet all)."""
    got = {"vllm:request_success_total": 0.0, "sse_server_mid_stream": 0.0}
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in got:
                got[name] = float(line.rsplit(" ", 1)[1])
    return got["vllm:request_success_total"], got["sse_server_mid_stream"]


def test_sigint_keeps_rows_and_marks_run_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "i.duckdb"
    with sse_server("--ttft-ms", "5", "--itl-ms", "20") as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "infbench", "run", "--url", url, "--db", str(db), "--duration", "60",
             "--arrival", "closed", "--concurrency", "4", "--output-tokens", "50", "--quiet"],
            cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Interrupt once requests are really flowing (start-up takes seconds on a busy machine)
        # and one is mid-stream. A closed loop of equal requests runs in waves that start
        # together, and waiting on completions alone sent the signal just after a wave ended:
        # beside a busy neighbour (round R62) before any request of the new wave had a token.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            done, mid = _server_counts(url)
            if done >= 6 and mid >= 1:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    status, reason = store_rows(db, "SELECT status, status_reason FROM runs")[0]
    assert status == "interrupted" and "SIGINT" in reason
    n_req, n_cancelled = store_rows(db, "SELECT count(*), count(*) FILTER (WHERE error_class = 'cancelled') FROM requests")[0]
    assert n_req > 4 and n_cancelled >= 1
    partial = store_rows(db, "SELECT count(*) FROM chunks c JOIN requests r USING (run_id, request_idx) "
                        "WHERE r.error_class = 'cancelled'")[0][0]
    assert partial > 0  # chunks of the requests cut short are kept too


def test_piped_run_logs_progress_lines_on_stderr(server: str, tmp_path: Path) -> None:
    r = infbench("run", "--url", server, "--db", str(tmp_path / "p.duckdb"), "--arrival", "closed",
                 "--concurrency", "2", "--duration", "11", "--output-tokens", "8")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if " done " in ln and "req/s" in ln]
    assert len(lines) >= 3, r.stderr  # every 5 s, and once at the end
    done = [int(ln.split(" done ")[1].split()[0]) for ln in lines]
    assert done == sorted(done) and done[-1] > done[0]
    assert "\x1b[" not in r.stderr  # plain text for a CI log
