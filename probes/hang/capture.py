"""Capture a (possibly hung) multi-rank engine: every rank's Flight Recorder dump and stacks.

Three ways in:
- `capture_url(URL)`: the engine says where its ranks are (`GET /debug/ranks` ->
  `{"tensor_parallel_size": N, "ranks": [{"rank", "pid", "dump"[, "stacks"]}]}`), is asked to
  dump (`POST /debug/flight_recorder/dump`; each rank rewrites its `dump` file), and py-spy
  reads each pid. The HTTP server answers while the step loop hangs, which is why this works.
- `capture_pids([P, ...])`: py-spy on each process; the rank is the process's `RANK`
  environment variable where /proc shows it, else its place in the list. Dumps, if any, come
  from a folder (`dumps=`).
- `capture_dumps(DIR)`: a folder someone saved: Flight Recorder dumps named `<prefix><rank>`
  (`rank_0`, `nccl_trace_rank_3`, as PyTorch names them) and optional stacks
  `stacks_<rank>.json` (py-spy --json) or `stacks_<rank>.txt` / `stacks_rank_<rank>`
  (faulthandler, as the bundled engine appends on SIGUSR2).

A dump that is a hostile or broken pickle stops the capture (CaptureError, one line); a rank
whose dump or stacks are missing is kept with the reason, since a missing rank is evidence.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from infbench.http_client import NoAnswer, request
from probes.hang.errors import CaptureError
from probes.hang.frdump import read_dump
from probes.hang.model import Capture, RankCapture, new_capture_id
from probes.hang.stacks import (
    Stacks,
    faulthandler_via_signal,
    pid_alive,
    pyspy_dump,
    read_stacks_file,
)

HTTP_TIMEOUT_S = 10.0
DUMP_WAIT_S = 15.0
_DUMP_NAME = re.compile(r"^(?!stacks)([A-Za-z_\-.]*?)(\d+)$")
_STACKS_NAME = re.compile(r"^stacks[_\-]?(?:rank[_\-]?)?(\d+)(?:\.(json|txt))?$")


def _http(url: str, method: str = "GET", timeout_s: float = HTTP_TIMEOUT_S) -> Any:
    try:
        answer = request(method, url, timeout_s=timeout_s,
                         content=b"" if method == "POST" else None)
    except NoAnswer as exc:
        raise CaptureError(f"{method} {url}: no answer ({exc})") from None
    if not 200 <= answer.status < 300:
        raise CaptureError(f"{method} {url}: HTTP {answer.status} (the bundled engine answers it "
                           "with --dump-dir and more than one rank; for another engine use "
                           "--pids with --dumps)")
    body = answer.body
    try:
        return json.loads(body) if body.strip() else None
    except json.JSONDecodeError:
        raise CaptureError(f"{method} {url}: the answer is not JSON") from None


def _ranks_doc(doc: Any, url: str) -> tuple[int | None, list[dict[str, Any]]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("ranks"), list) or not doc["ranks"]:
        raise CaptureError(f"{url}/debug/ranks: expected {{\"ranks\": [{{\"rank\", \"pid\", "
                           "\"dump\"}}, ...]}")
    out = []
    for r in doc["ranks"]:
        if not isinstance(r, dict) or not isinstance(r.get("rank"), int):
            raise CaptureError(f"{url}/debug/ranks: a rank without an integer 'rank'")
        out.append(r)
    n = doc.get("tensor_parallel_size")
    return (n if isinstance(n, int) else None), out


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _wait_for_dumps(paths: dict[int, Path], before: dict[int, int | None],
                    wait_s: float) -> dict[int, bool]:
    """Which dumps were rewritten (mtime moved, size stable for 0.2 s) within wait_s."""
    fresh = {r: False for r in paths}
    sizes: dict[int, tuple[int, float]] = {}
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(fresh.values()):
        for r, p in paths.items():
            if fresh[r]:
                continue
            m = _mtime(p)
            if m is None or m == before[r]:
                continue
            size = p.stat().st_size
            last = sizes.get(r)
            if last and last[0] == size and time.monotonic() - last[1] >= 0.2 and size > 0:
                fresh[r] = True
            elif not last or last[0] != size:
                sizes[r] = (size, time.monotonic())
        time.sleep(0.05)
    return fresh


def _load_dump(rc: RankCapture, path: Path) -> None:
    """Read rank rc's dump; a missing file is kept as evidence, a bad one stops the capture."""
    rc.dump_path = str(path)
    if not path.exists():
        rc.dump_status, rc.dump_error = "missing", f"{path}: no such file"
        return
    rc.dump = read_dump(path)  # CaptureError / DumpRefused propagate: one line, exit 2
    rc.dump_status, rc.dumped_at_ns = "ok", _mtime(path)


def _note_dead(cap: Capture) -> None:
    """A pid that is gone is evidence (the rank died), not a capture failure."""
    for rc in cap.ranks:
        if rc.pid is not None and rc.alive is False:
            cap.notes.append(f"rank {rc.rank}: pid {rc.pid} was not running at the capture")


def capture_url(url: str, *, stacks: bool = True, dump_wait_s: float = DUMP_WAIT_S,
                http_timeout_s: float = HTTP_TIMEOUT_S) -> Capture:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CaptureError(f"--url {url}: expected http://HOST:PORT")
    base = url.rstrip("/")
    world, ranks = _ranks_doc(_http(base + "/debug/ranks", timeout_s=http_timeout_s), base)
    cap = Capture(new_capture_id(), "url", url, [], world_size=world or len(ranks),
                  hostname=socket.gethostname())
    paths = {int(r["rank"]): Path(str(r["dump"])) for r in ranks if r.get("dump")}
    before = {r: _mtime(p) for r, p in paths.items()}
    if paths:  # an engine of one process lists no dump: its stacks are the capture
        _http(base + "/debug/flight_recorder/dump", "POST", timeout_s=http_timeout_s)
    by_rank: dict[int, RankCapture] = {}
    for r in ranks:
        pid = r.get("pid") if isinstance(r.get("pid"), int) else None
        rc = RankCapture(int(r["rank"]), pid=pid, alive=pid_alive(pid) if pid else None)
        if stacks and pid:
            rc.stacks = _stacks_of(pid, r.get("stacks"))
        by_rank[rc.rank] = rc
        cap.ranks.append(rc)
    fresh = _wait_for_dumps(paths, before, dump_wait_s)
    for rank, path in paths.items():
        _load_dump(by_rank[rank], path)
        if by_rank[rank].dump is not None and not fresh[rank]:
            cap.notes.append(f"rank {rank} did not rewrite its dump within {dump_wait_s:g} s of "
                             "the request: its earlier dump (from its watchdog or an earlier "
                             "request) is used")
    for rc in cap.ranks:
        if rc.rank not in paths:
            rc.dump_status, rc.dump_error = "missing", "the engine lists no dump file for it"
    _note_dead(cap)
    return cap


def _stacks_of(pid: int, fallback_path: Any) -> Stacks:
    s = pyspy_dump(pid)
    if s.status == "permission_denied" and isinstance(fallback_path, str):
        # The engine registered faulthandler on SIGUSR2 for this file: ask it that way.
        fh = faulthandler_via_signal(pid, Path(fallback_path), signal.SIGUSR2)
        if fh.status == "ok":
            return fh
    return s


def _rank_from_environ(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"RANK="):
            try:
                return int(kv[5:])
            except ValueError:
                return None
    return None


def capture_pids(pids: list[int], *, dumps: Path | None = None) -> Capture:
    if not pids:
        raise CaptureError("--pids: give at least one process id")
    if len(set(pids)) != len(pids):
        raise CaptureError(f"--pids: a pid is listed twice ({','.join(map(str, pids))})")
    env_ranks = [_rank_from_environ(p) for p in pids]
    use_env = all(r is not None for r in env_ranks) and len(set(env_ranks)) == len(pids)
    cap = Capture(new_capture_id(), "pids", ",".join(map(str, pids)), [],
                  hostname=socket.gethostname())
    if not use_env:
        cap.notes.append("ranks are the order of --pids (the processes' RANK variables were "
                         "not all readable and distinct)")
    files = _dump_files(dumps) if dumps is not None else ({}, {})
    for i, pid in enumerate(pids):
        rank = int(env_ranks[i]) if use_env else i  # type: ignore[arg-type]  # use_env: none is None
        rc = RankCapture(rank, pid=pid, alive=pid_alive(pid), stacks=pyspy_dump(pid))
        if dumps is not None:
            path = files[0].get(rank)
            if path is None:
                rc.dump_status, rc.dump_error = "missing", f"{dumps}: no dump for rank {rank}"
            else:
                _load_dump(rc, path)
        cap.ranks.append(rc)
    cap.world_size = len(pids)
    _note_dead(cap)
    return cap


def _looks_pickled(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(1) == b"\x80"  # PROTO: every pickle since protocol 2
    except OSError:
        return False


def _dump_files(folder: Path) -> tuple[dict[int, Path], dict[int, Path]]:
    """Dumps are the files `<prefix><rank>` of the one prefix whose files are pickles (logs
    like `log0` or markers like `ready_0` share the naming); every file with that prefix is
    read as a dump, so a hostile one among them is refused, never skipped."""
    if not folder.is_dir():
        raise CaptureError(f"--dumps {folder}: not a directory")
    by_prefix: dict[str, dict[int, Path]] = {}
    stacks: dict[int, Path] = {}
    for p in sorted(folder.iterdir()):
        if not p.is_file():
            continue
        s = _STACKS_NAME.match(p.name)
        if s:
            if p.stat().st_size == 0:  # the engine's SIGUSR2 file before any signal
                continue
            if int(s.group(1)) in stacks:
                raise CaptureError(f"--dumps {folder}: two stacks files for rank {s.group(1)}")
            stacks[int(s.group(1))] = p
            continue
        m = _DUMP_NAME.match(p.name)
        if m:
            by_prefix.setdefault(m.group(1), {})[int(m.group(2))] = p
    pickled = [pre for pre, files in by_prefix.items() if any(map(_looks_pickled, files.values()))]
    if len(pickled) > 1:
        raise CaptureError(f"--dumps {folder}: dumps under several prefixes "
                           f"({', '.join(sorted(pickled))}): keep one capture per folder")
    return (by_prefix[pickled[0]] if pickled else {}), stacks


def capture_dumps(folder: Path) -> Capture:
    dumps, stacks = _dump_files(folder)
    if not dumps:
        raise CaptureError(f"--dumps {folder}: no Flight Recorder dumps (files named like "
                           "rank_0, nccl_trace_rank_1: a prefix and the rank)")
    cap = Capture(new_capture_id(), "dumps", str(folder), [], hostname=None)
    for rank in sorted(set(dumps) | set(stacks)):
        rc = RankCapture(rank)
        if rank in dumps:
            _load_dump(rc, dumps[rank])
        else:
            rc.dump_status, rc.dump_error = "missing", f"{folder}: no dump for rank {rank}"
        if rank in stacks:
            rc.stacks = read_stacks_file(stacks[rank])
        cap.ranks.append(rc)
    cap.world_size = len(cap.ranks)
    cap.notes.append("waits are measured up to each dump file's modification time (for a "
                     "copied folder, when it was copied)")
    return cap


def parse_pids(text: str) -> list[int]:
    """'4211,4212' -> [4211, 4212]; anything else is one line naming the bad item."""
    out = []
    for p in (x.strip() for x in text.split(",")):
        if p:
            if not p.isdigit() or int(p) <= 0:
                raise CaptureError(f"--pids: {p!r} is not a process id")
            out.append(int(p))
    return out


def capture(url: str | None = None, pids: str | None = None,
            dumps: Path | None = None) -> Capture:
    """The one way in that was given: an engine URL, pids (with their dumps' folder), a folder."""
    if url:
        return capture_url(url)
    if pids:
        return capture_pids(parse_pids(pids), dumps=dumps)
    if dumps is None:
        raise CaptureError("give an engine URL, process ids or a folder of dumps")
    return capture_dumps(dumps)
