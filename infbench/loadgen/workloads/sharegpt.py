"""ShareGPT-format JSON: a list of {"conversations": [{"from": "human"|"gpt", "value": ...}]}.

Each record gives one request: the first human turn is the prompt (after a leading system
turn, which is left out; `user`/`assistant` roles read as `human`/`gpt`), and the reply's length
(estimated with the calibrated token model) is max_tokens unless an output length is forced.
That estimate follows the target's calibration, so without `--output-tokens` the same seed
sends the same records in the same order to every target but not always the same max_tokens.
Unless prompts are reused, each prompt starts with a few salted words (`SALT_WORDS`). The file
is read and checked before the run: skipped records are counted by reason and warned about,
and the config says how many were used (`load_sharegpt`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.base import RequestSpec, Session, single
from infbench.loadgen.workloads.file_report import FileReport
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.prompts import TokenModel, random_words

# Salt words before each prompt (unless --reuse-prompts): 4 picks from 140 words, about 28
# bits per request, so two requests of different runs start alike once in ~400 million.
SALT_WORDS = 4


USER_ROLES = ("human", "user")
REPLY_ROLES = ("gpt", "assistant", "chatgpt", "bard")


def _turn(t: Any) -> tuple[str | None, Any]:
    return (str(t.get("from") or t.get("role") or "").lower(), t.get("value", t.get("content"))) \
        if isinstance(t, dict) else (None, None)


def load_sharegpt(path: Path, report: FileReport | None = None) -> list[tuple[str, str]]:
    """(prompt, reply) per usable record. Roles `user`/`assistant` are read as `human`/`gpt`,
    and a leading `system` turn is left out of the prompt (counted); records with no such
    first exchange are skipped (counted by reason). None usable, or a file that is not a JSON
    list, is an error."""
    report = report if report is not None else FileReport(path.name, unit="record")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"dataset: cannot read ShareGPT file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"dataset: {path.name} is not UTF-8 text ({exc.reason})") from None
    except ValueError as exc:
        raise ValueError(f"dataset: {path.name} is not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise ValueError(f"dataset: {path.name} is not a JSON list of conversations")
    pairs = []
    for n, rec in enumerate(data, start=1):
        report.read += 1
        turns = rec.get("conversations") if isinstance(rec, dict) else None
        if not isinstance(turns, list):
            report.note("shape", n, "have no 'conversations' list and are skipped")
            continue
        if turns and _turn(turns[0])[0] == "system":
            report.note("system", n, "begin with a system turn, which is left out of the prompt")
            turns = turns[1:]
        if len(turns) < 2:
            report.note("single", n, "have a single turn (no reply) and are skipped")
            continue
        (r1, v1), (r2, v2) = _turn(turns[0]), _turn(turns[1])
        if r1 not in USER_ROLES or r2 not in REPLY_ROLES:
            report.note("roles", n, "do not open with a human/user turn and its gpt/assistant reply "
                                    "and are skipped")
            continue
        if not isinstance(v1, str) or not isinstance(v2, str) or not v1.strip() or not v2.strip():
            report.note("empty", n, "have an empty or non-text first exchange and are skipped")
            continue
        report.mark_used(n)
        pairs.append((v1, v2))
    if not pairs:
        why = "; ".join(report.warnings()) or "it is empty"
        raise ValueError(f"dataset: {path.name} has no conversation starting human → gpt ({why})")
    return pairs


@dataclass
class ShareGPT:
    path: Path
    tokens: TokenModel
    output_len: LengthDist | None = None
    name: str = "sharegpt"
    needs_text: bool = False
    _pairs: list[tuple[str, str]] = field(default_factory=list, repr=False)
    _report: FileReport | None = field(default=None, repr=False)

    def load(self) -> list[tuple[str, str]]:
        """Read and check the file (once); raises ValueError with a one-line reason."""
        if self._report is None:
            report = FileReport(self.path.name, unit="record")
            self._pairs = load_sharegpt(self.path, report)
            self._report = report
        return self._pairs

    def warnings(self) -> list[str]:
        self.load()
        assert self._report is not None
        return [f"dataset: {w}" for w in self._report.warnings()]

    def sessions(self, streams: Streams) -> Iterator[Session]:
        self.load()
        order = streams.choices()
        outs = self.output_len.stream(streams.output_lengths()) if self.output_len else None
        text = streams.text()
        while True:  # seeded shuffles, repeated for as long as the run asks
            for i in order.permutation(len(self._pairs)).tolist():
                prompt, reply = self._pairs[i]
                if outs is not None:
                    n_out = next(outs)
                else:  # the reply's length in the target's tokens, so it follows calibration
                    n_out = max(1, round(self.tokens.content_tokens(reply)))
                if streams.salted:
                    # The dataset's text is the same in every run; a few salted words ahead of
                    # it make the first cache block differ per request and per run.
                    prompt = f"{random_words(text, SALT_WORDS)} {prompt}"
                yield single(RequestSpec(label="sharegpt", max_tokens=n_out, prompt=prompt))

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"workload": self.name, "dataset": str(self.path),
                               "output_tokens": str(self.output_len) if self.output_len else "from dataset"}
        if self._report is not None:
            out["rows"] = self._report.describe()
        return out
