"""What a trace path holds, told by its bytes, not its name: SQLite's header means an Nsight
Systems export, gzip's magic or JSON means a Kineto trace; a directory holds one file per
rank. Apart from the importer because reading a file in memory (`TraceFrame`) needs this
and none of the importer's DuckDB.
"""

from __future__ import annotations

import re
from pathlib import Path

from probes.traces.errors import TraceError

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.I)
_JSON_SUFFIXES = (".json", ".json.gz", ".gz")


def _kind(path: Path) -> str:
    try:
        with path.open("rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if head.startswith(b"SQLite format 3"):
        return "nsys"
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    raise TraceError(f"{path}: neither a PyTorch profiler JSON trace nor an Nsight Systems "
                     "SQLite export (run `nsys export --type sqlite` on a .nsys-rep)")


def rank_files(path: Path) -> tuple[str, list[tuple[Path, int | None]]]:
    """(source kind, [(file, rank hint)]) of a trace file or rank directory."""
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_file():
        return _kind(path), [(path, None)]
    files = sorted(p for p in path.iterdir() if p.is_file()
                   and (p.name.endswith(_JSON_SUFFIXES) or p.suffix in (".sqlite", ".db")))
    if not files:
        raise TraceError(f"{path}: no trace files (*.json, *.json.gz, *.sqlite) in the directory")
    kinds = {_kind(p) for p in files}
    if len(kinds) > 1:
        raise TraceError(f"{path}: mixes Kineto and Nsight files; import them separately")
    hinted: list[tuple[Path, int | None]] = []
    for i, p in enumerate(files):
        m = _RANK_IN_NAME.search(p.name)
        hinted.append((p, int(m.group(1)) if m else i))
    return kinds.pop(), hinted
