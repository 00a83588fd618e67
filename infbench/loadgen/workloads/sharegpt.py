"""ShareGPT-format JSON: a list of {"conversations": [{"from": "human"|"gpt", "value": ...}]}.

Each record gives one request: the first human turn is the prompt, and the reply's length
(estimated with the calibrated token model) is max_tokens unless an output length is forced.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.workloads.base import RequestSpec, Session, single
from infbench.loadgen.workloads.prompts import TokenModel


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

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        if not self._pairs:
            self._pairs = load_sharegpt(self.path)
        while True:  # seeded shuffles, repeated for as long as the run asks
            for i in rng.permutation(len(self._pairs)):
                prompt, reply = self._pairs[int(i)]
                if self.output_len is not None:
                    n_out = int(self.output_len.sample(rng)[0])
                else:
                    n_out = max(1, round(len(reply.split()) * self.tokens.per_word))
                yield single(RequestSpec(label="sharegpt", max_tokens=n_out, prompt=prompt))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "dataset": str(self.path),
                "output_tokens": str(self.output_len) if self.output_len else "from dataset"}
