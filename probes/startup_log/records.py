"""A start-up log as records: which process printed each line, at what level, and the message.

Engines prefix their lines in many ways, and multi-GPU logs interleave ranks:

    INFO 12-13 19:54:18 worker.py:243] ...                             vLLM <= 0.7 (the driver)
    INFO 04-24 16:32:59 [loader.py:458] ...                            vLLM >= 0.8
    (VllmWorkerProcess pid=521) INFO 04-12 08:21:19 [worker.py:267] .. vLLM V0 worker
    (VllmWorker rank=3 pid=1090) ERROR ...                             vLLM V1 multiproc (<= 0.10)
    (Worker_TP1_EP1 pid=2709391) INFO ...                              vLLM V1 (>= 0.10)
    (EngineCore_DP0 pid=26283) INFO ...                                vLLM V1 engine core
    (RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO ... [repeated 30x across cluster]
    [2025-10-16 09:06:22 TP5] ...                                      SGLang (DP0 TP0, PP0 ...)
    [2025-08-12T08:42:32Z] (EngineCore_0 pid=13564) DEBUG ...          a container runtime's stamp
    INFO: ...                                                          uvicorn / older engines

A line without a process prefix is the driver's (vLLM V0 runs rank 0 in the driver). ANSI
colour codes are removed first. A stamp nobody listed here (`docker compose`'s `vllm-1  | `,
a CRI runtime's `2025-12-02T00:26:41.1Z stdout F `, a shell's own prefix) is dropped where
one of the forms above follows it within the first 160 characters, so a re-prefixed log
reads as the engine printed it.

Lines are what an editor numbers: split at "\n" only. tqdm's progress bars and vLLM's
banner end segments with a bare "\r"; splitting there too (str.splitlines) shifted every
later line number away from `grep -n`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\dT[\d:.]+Z?\]\s*")
_PROC = re.compile(r"^\(?(?P<proc>(?:VllmWorkerProcess|VllmWorker|RayWorkerWrapper|Worker_[A-Z0-9_]+"
                   r"|Worker|EngineCore(?:_DP\d+|_\d+)?|APIServer|LLMRayActor)\b[^)]*)\)\s*")
_VLLM = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:.]+ "
                   r"\[?[\w.]+:\d+\]\s?")
_SGLANG = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:.]+(?P<ranks>(?: (?:DP|PP|TP|EP|CP)\d+)*)\]\s?")
_PLAIN = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_RANK = re.compile(r"rank=(\d+)")
_TP = re.compile(r"Worker_TP(\d+)")
_PID = re.compile(r"pid=(\d+)")
_IP = re.compile(r"ip=([\w.:-]+)")
# Where a known form starts inside a line that began with an unknown stamp.
_EMBEDDED = re.compile(r"\((?:VllmWorkerProcess|VllmWorker|RayWorkerWrapper|Worker|EngineCore|APIServer|"
                       r"LLMRayActor)\b[^)]*\)\s*|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: \d\d-\d\d [\d:.]+ "
                       r"\[?[\w.]+:\d+\]|:\s)|\[\d{4}-\d\d-\d\d [\d:.]+(?: (?:DP|PP|TP|EP|CP)\d+)*\]")
_EMBED_WITHIN = 160


@dataclass(frozen=True)
class Record:
    line_no: int      # 1-based line in the file
    rank: str         # who printed it: driver, engine, rank=N, TPn, pid=N, ...
    level: str | None
    message: str
    raw: str          # the line as printed (ANSI removed)
    proc: str = ""    # the process prefix as printed ("APIServer pid=6489"), "" if none
    structured: bool = False  # a logger's record (level, process or SGLang stamp), not bare text


def _rank(proc: str) -> str:
    if proc.startswith("EngineCore"):
        return "engine"
    if m := _TP.search(proc):
        return f"TP{m.group(1)}"
    if m := _RANK.search(proc):
        return f"rank={m.group(1)}"
    if m := _PID.search(proc):
        ip = _IP.search(proc)
        return f"pid={m.group(1)}" + (f"@{ip.group(1)}" if ip else "")
    return proc.split()[0]


def lines_of(text: str) -> list[str]:
    """The file's lines as an editor numbers them; a segment overwritten by "\r" is dropped,
    as the terminal showed it."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = []
    for line in lines:
        parts = [p for p in line.split("\r") if p.strip()]
        out.append(parts[-1] if parts else "")
    return out


def _known_start(rest: str) -> bool:
    return bool(_PROC.match(rest) or _VLLM.match(rest) or _SGLANG.match(rest) or _PLAIN.match(rest))


def split_records(text: str) -> list[Record]:
    out: list[Record] = []
    for i, line in enumerate(lines_of(text), start=1):
        raw = _ANSI.sub("", line).rstrip()
        rest = _STAMP.sub("", raw)
        if not _known_start(rest) and (m := _EMBEDDED.search(rest[:_EMBED_WITHIN])):
            rest = rest[m.start():]
        rank, proc = "driver", ""
        level = None
        structured = False
        if m := _PROC.match(rest):
            proc = m.group("proc")
            rank, rest, structured = _rank(proc), rest[m.end():], True
        if m := _VLLM.match(rest):
            level, rest, structured = m.group("level"), rest[m.end():], True
        elif m := _SGLANG.match(rest):
            ranks = m.group("ranks").split()
            tp = [r for r in ranks if r.startswith("TP")]
            if ranks:
                rank = " ".join(r for r in ranks if r.startswith(("DP", "PP"))) + (
                    (" " if len(ranks) > len(tp) else "") + tp[0] if tp else "")
                rank = rank.strip()
            rest, structured = rest[m.end():], True
            if m := _PLAIN.match(rest):  # uvicorn's lines under SGLang's stamp
                level, rest = m.group("level"), rest[m.end():]
        elif m := _PLAIN.match(rest):
            level, rest, structured = m.group("level"), rest[m.end():], True
        message = _REPEATED.sub("", rest).strip()
        if message:
            out.append(Record(i, rank, level, message, raw, proc, structured))
    return out
