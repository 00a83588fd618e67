"""ShareGPT-format JSON: a list of {"conversations": [{"from": "human"|"gpt", "value": ...}]}.

Each record gives one request: the first human turn is the prompt, and the reply's length
(estimated with the calibrated token model) is max_tokens unless an output length is forced.
That estimate follows the target's calibration, so without `--output-tokens` the same seed
sends the same records in the same order to every target but not always the same max_tokens.
Unless prompts are reused, each prompt starts with a few salted words (`SALT_WORDS`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.base import RequestSpec, Session, single
from infbench.loadgen.workloads.prompts import TokenModel, random_words

# Salt words before each prompt (unless --reuse-prompts): 4 picks from 140 words, about 28
# bits per request, so two requests of different runs start alike once in ~400 million.
SALT_WORDS = 4


def load_sharegpt(path: Path) -> list[tuple[str, str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"dataset: cannot read ShareGPT file {path}: {exc}") from None
    if not isinstance(data, list):
        raise ValueError(f"dataset: {path} is not a JSON list of conversations")
    pairs = []
    for rec in data:
        turns = rec.get("conversations") if isinstance(rec, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if (isinstance(first, dict) and isinstance(second, dict)
                and first.get("from") == "human" and second.get("from") == "gpt"
                and first.get("value") and second.get("value")):
            pairs.append((str(first["value"]), str(second["value"])))
    if not pairs:
        raise ValueError(f"dataset: {path} has no conversation starting human → gpt")
    return pairs


@dataclass
class ShareGPT:
    path: Path
    tokens: TokenModel
    output_len: LengthDist | None = None
    name: str = "sharegpt"
    needs_text: bool = False
    _pairs: list[tuple[str, str]] = field(default_factory=list, repr=False)

    def sessions(self, streams: Streams) -> Iterator[Session]:
        if not self._pairs:
            self._pairs = load_sharegpt(self.path)
        order = streams.choices()
        outs = self.output_len.stream(streams.output_lengths()) if self.output_len else None
        text = streams.text()
        while True:  # seeded shuffles, repeated for as long as the run asks
            for i in order.permutation(len(self._pairs)).tolist():
                prompt, reply = self._pairs[i]
                if outs is not None:
                    n_out = next(outs)
                else:  # the reply's length in the target's tokens, so it follows calibration
                    n_out = max(1, round(len(reply.split()) * self.tokens.per_word))
                if streams.salted:
                    # The dataset's text is the same in every run; a few salted words ahead of
                    # it make the first cache block differ per request and per run.
                    prompt = f"{random_words(text, SALT_WORDS)} {prompt}"
                yield single(RequestSpec(label="sharegpt", max_tokens=n_out, prompt=prompt))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "dataset": str(self.path),
                "output_tokens": str(self.output_len) if self.output_len else "from dataset"}
