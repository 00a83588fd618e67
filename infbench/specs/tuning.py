"""Kernel tuning tables keyed on the device name, as engines' start-up logs name them.

vLLM and SGLang take a Triton kernel's launch parameters (tile sizes, warps, stages) for a
fused-MoE layer (`E=<experts>,N=<shard width>`) or a block-FP8 GEMM (`N=...,K=...`) from a
JSON table whose file name holds the layer's shape, its dtype and block shape, and the
device's name as torch reports it with spaces made `_` (`NVIDIA_H200`,
`NVIDIA_H100_80GB_HBM3`). The lookup is by exact file name: a table tuned on an H100 is not
read on an H200 (https://github.com/sgl-project/sglang/issues/32806 shows the lookup). With
no table the kernel runs a generic default, and each rank logs it, in these wordings:

- vLLM fused MoE: "Using default MoE config. Performance might be sub-optimal! Config file
  not found at PATH" (PATH one path; since about 0.10 a list of the folders tried,
  "['...json']", and the message on two lines);
- vLLM / SGLang block FP8: "Using default W8A8 Block FP8 kernel config. Performance might be
  sub-optimal! Config file not found at PATH";
- SGLang fused MoE: "Using default MoE kernel config. ... Config file not found at PATH, you
  can create them with URL"; "Using MoE kernel config with down_moe=False. ..." (the table
  of the down projection, `..._down.json`); "Config file not found at PATH. Fallback to
  triton version X and use MoE kernel config from PATH2. ..." (a table tuned under another
  Triton is read);
- a table found: vLLM "Using configuration from PATH for MoE layer.", SGLang "Using MoE
  kernel config from PATH.".

`read_tuning_lines(text)` reads any of them (several in one line, as pastes that lost their
line breaks have them); `shipped(engine)` is the list of tables an engine release ships
(`data/`), to say which other devices have a table for the same shape.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data"

# A table's file name: shape keys (E=, N=, K=, H=), then device_name=, up to ".json". Block
# shapes print as "[128,128]" (vLLM) or "[128, 128]" (SGLang), so a space may be inside.
_FILE = re.compile(r"(?:[A-Z]\w*=\d+,)+device_name=[^/\\'\"\n]*?\.json")
_PAIR = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]*)")
_MISSING = re.compile(r"[Cc]onfig file not found at")
_FOUND = re.compile(r"Using configuration from|Using MoE kernel config from")
_FALLBACK = re.compile(r"Fallback to triton version (\S+?) and use MoE kernel config from")
_REUSED_UP = re.compile(r"reusing the tuned up-projection config")
_TRITON_DIR = re.compile(r"/(triton_\d+_\d+_\d+)/")
_REACH = 800  # characters after the phrase within which its path must start

# torch's device names, as table files spell them, for the GPUs of the catalog (gpus.py);
# the spellings are the ones vLLM's and SGLang's own table files use.
CATALOG_GPU_OF_DEVICE = {
    "NVIDIA_H100_80GB_HBM3": "H100-SXM",
    "NVIDIA_H100_PCIe": "H100-PCIe",
    "NVIDIA_H200": "H200-SXM",
    "NVIDIA_A100-SXM4-80GB": "A100-80GB-SXM",
    "NVIDIA_A100-SXM4-40GB": "A100-40GB",
    "NVIDIA_L40S": "L40S",
    "NVIDIA_L4": "L4",
    "NVIDIA_B200": "B200",
    "AMD_Instinct_MI300X": "MI300X",
}

KERNELS = {"fused_moe": "fused-MoE", "block_fp8_gemm": "block-FP8 GEMM"}


@dataclass(frozen=True)
class TuningTable:
    """One table file name, read apart."""

    kernel: str                 # fused_moe | block_fp8_gemm
    shape: str                  # "E=16,N=1024" or "N=2112,K=7168"
    device_name: str            # as in the file name: "NVIDIA_H200"
    dtype: str | None           # "fp8_w8a8"; None: the model's own 16-bit type
    block_shape: str | None     # "128,128"
    variant: str | None         # "down": SGLang's table for the down projection
    file: str

    @property
    def key(self) -> str:
        """The table's identity without the device: what another device's table must match."""
        return "|".join((self.kernel, self.shape, self.dtype or "", self.block_shape or "",
                         self.variant or ""))

    @property
    def describe(self) -> str:
        parts = [KERNELS[self.kernel], self.shape]
        if self.dtype:
            parts.append(self.dtype)
        if self.block_shape:
            parts.append(f"block [{self.block_shape}]")
        if self.variant:
            parts.append(f"{self.variant} projection")
        return " ".join(parts)

    @property
    def catalog_gpu(self) -> str | None:
        return CATALOG_GPU_OF_DEVICE.get(self.device_name)


def parse_table_file(name: str) -> TuningTable | None:
    """A table file name (no folder) read apart; None if it names no device or kernel."""
    if not name.endswith(".json"):
        return None
    stem, variant = name[:-5], None
    if stem.endswith("_down"):
        stem, variant = stem[:-5], "down"
    pairs = dict(_PAIR.findall(stem))
    device = pairs.get("device_name")
    if not device:
        return None
    if "E" in pairs and "N" in pairs:
        kernel, shape = "fused_moe", f"E={pairs['E']},N={pairs['N']}"
    elif "N" in pairs and "K" in pairs:
        kernel, shape = "block_fp8_gemm", f"N={pairs['N']},K={pairs['K']}"
    else:
        return None
    block = pairs.get("block_shape")
    if block is not None:
        block = block.strip("[]").replace(" ", "")
    return TuningTable(kernel, shape, device, pairs.get("dtype") or None, block or None, variant,
                       name)


@dataclass(frozen=True)
class TuningLine:
    """What one log message says about one table."""

    outcome: str                # missing | found | fallback (another tuned table is read)
    table: TuningTable
    path: str                   # as printed
    engine: str | None          # vllm | sglang | aiter where the text says; None: not said
    triton_dir: str | None = None   # SGLang's folder per Triton version: "triton_3_5_1"
    used_path: str | None = None    # fallback: the table read instead, where printed
    fallback_to: str | None = None  # fallback: what was read, in words


def _engine(text: str, path: str) -> str | None:
    for name in ("sglang", "aiter", "vllm"):
        if f"/{name}/" in path or f"{name}/" in path:
            return name
    if "you can create them with" in text or "MoE kernel config" in text:
        return "sglang"
    if "for MoE layer" in text or "Using default MoE config" in text:
        return "vllm"
    return None


def _path_at(text: str, start: int) -> tuple[str, TuningTable] | None:
    """The first table path starting within reach of `start`: (path as printed, table)."""
    m = _FILE.search(text, start, start + _REACH)
    if m is None:
        return None
    table = parse_table_file(m.group(0))
    if table is None:
        return None
    lo = m.start()
    while lo > start and text[lo - 1] not in " \t'\"[":
        lo -= 1
    return text[lo:m.end()], table


def read_tuning_lines(text: str) -> list[TuningLine]:
    """Every table a message says was found, missing, or replaced by another Triton's."""
    anchors = sorted([(m.start(), m.end(), "missing") for m in _MISSING.finditer(text)]
                     + [(m.start(), m.end(), "found") for m in _FOUND.finditer(text)])
    out: list[TuningLine] = []
    for i, (start, end, outcome) in enumerate(anchors):
        stop = anchors[i + 1][0] if i + 1 < len(anchors) else len(text)
        hit = _path_at(text[:stop], end)
        if hit is None:
            continue
        path, table = hit
        segment = text[start:stop]
        # the words before the phrase name the engine too ("Using default MoE config. ...")
        engine = _engine(text[max(0, start - 120):stop], path)
        triton = _TRITON_DIR.search(path)
        mine = triton.group(1) if triton else None
        if outcome == "missing" and (fb := _FALLBACK.search(segment)):
            used = _path_at(segment, fb.end())
            out.append(TuningLine("fallback", table, path, engine or "sglang", mine,
                                  used[0] if used else None,
                                  f"the table tuned under Triton {fb.group(1)}"))
            continue
        if outcome == "missing" and _REUSED_UP.search(segment):
            out.append(TuningLine("fallback", table, path, engine or "sglang", mine, None,
                                  "the up projection's tuned table (without TMA)"))
            continue
        out.append(TuningLine(outcome, table, path, engine, mine))
    return out


def needs_continuation(text: str) -> bool:
    """A message that names a table and is cut inside its file name (a terminal or a paste
    broke the line): its next line, if it starts no record, finishes the name."""
    if not (_MISSING.search(text) or _FOUND.search(text)):
        return False
    at = text.rfind("device_name=")
    return at >= 0 and ".json" not in text[at:]


@dataclass(frozen=True)
class ShippedTables:
    """The tables one engine release ships, from its package's own folders (`data/`)."""

    engine: str
    version: str
    source: str
    tables: tuple[tuple[str, TuningTable], ...]   # (path inside the package folders, table)

    def devices_for(self, table: TuningTable) -> list[str]:
        """Devices this release ships a table of the same kernel, shape, dtype, block and
        variant for, in name order."""
        return sorted({t.device_name for _, t in self.tables if t.key == table.key})

    def paths_for(self, table: TuningTable, device_name: str) -> list[str]:
        return [p for p, t in self.tables if t.key == table.key and t.device_name == device_name]


_HEADER = re.compile(r"^#\s*(engine|version|source):\s*(.+)$")


@functools.cache
def shipped(engine: str) -> ShippedTables | None:
    """The release of `engine` whose table names are in `data/tuning_tables_<engine>.txt`."""
    path = DATA / f"tuning_tables_{engine}.txt"
    if not path.is_file():
        return None
    meta: dict[str, str] = {}
    tables: list[tuple[str, TuningTable]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := _HEADER.match(line):
            meta[m.group(1)] = (meta.get(m.group(1), "") + " " + m.group(2).strip()).strip()
            continue
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        table = parse_table_file(line.rsplit("/", 1)[-1])
        if table is not None:
            tables.append((line, table))
    return ShippedTables(meta.get("engine", engine), meta.get("version", "?"),
                         meta.get("source", str(path.name)), tuple(tables))
