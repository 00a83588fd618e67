"""The real vLLM 0.32.0 CPU server log (issue 24) and the copies the tests make of it: cut
at a line, with lines reworded as a version the patterns never saw would print them, or with
a stamp in front of every line. Line numbers are the file's (`grep -n`)."""

from __future__ import annotations

from pathlib import Path

from probes.startup_log import read_log

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "startup_logs"
REAL = FIXTURES / "vllm_0.32.0_cpu_started.log"

# Where things are in the real log (1-based, as an editor numbers them).
CONFIG_LINE = 21          # "Initializing a V1 LLM engine (v0.32.0) with config: ..."
WEIGHTS_LAST = 46         # "Loading weights took 0.05 seconds"
KV_BYTES_LINE = 53        # "Explicitly set (1.0/11.09) GiB for KV cache on node 0."
KV_TOKENS_LINE = 54       # "CPU KV cache size: 524,288 tokens, Maximum concurrency ..."
API_SERVER_LINE = 63      # "Starting vLLM server on http://127.0.0.1:37193"
STARTUP_COMPLETE = 102    # uvicorn "Application startup complete."
FIRST_REQUEST = 103       # uvicorn access line


def real_lines() -> list[str]:
    """The file's lines (split at "\\n" only: its banner and tqdm lines hold bare "\\r")."""
    text = read_log(REAL)
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def join(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def cut(n: int, lines: list[str] | None = None) -> str:
    """The first n lines: a copy cut there."""
    return join((lines or real_lines())[:n])


def reworded(changes: dict[int, str], lines: list[str] | None = None) -> list[str]:
    """The log with the message of each given line (after its `[file.py:N] ` prefix, or
    the whole line where it has none) replaced."""
    out = list(lines or real_lines())
    for line_no, message in changes.items():
        old = out[line_no - 1]
        head = old[:old.index("] ") + 2] if "] " in old else ""
        out[line_no - 1] = head + message
    return out


# The KV lines as a build the patterns never saw might word them.
KV_REWORDED = {KV_BYTES_LINE: "Reserved 1.0 GiB of node 0 memory (11.09 GiB) for the KV pool.",
               KV_TOKENS_LINE: "KV pool capacity: 524,288 tokens; 128.00x concurrency at 4,096 "
                               "tokens per request"}


def readiness_reworded() -> list[str]:
    """Every readiness line of the real log in a new wording; the requests served after stay."""
    lines = real_lines()
    changes = {API_SERVER_LINE: "HTTP front end listening at http://127.0.0.1:37193"}
    for i in range(API_SERVER_LINE + 1, 100):
        changes[i] = f"Endpoint {i - API_SERVER_LINE} registered"
    out = reworded(changes, lines)
    out[99:102] = ["(APIServer pid=6489) INFO 12-02 00:26:45 [http.py:10] Front end process 6489 up",
                   "(APIServer pid=6489) INFO 12-02 00:26:45 [http.py:11] Lifespan hooks running",
                   "(APIServer pid=6489) INFO 12-02 00:26:45 [http.py:12] Lifespan hooks done"]
    return out
