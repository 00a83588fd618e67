"""Synthetic workloads: random lengths, shared-prefix groups, structured output."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.workloads.base import RequestSpec, Session, single
from infbench.loadgen.workloads.prompts import TokenModel, make_prompt, random_words


@dataclass
class Synthetic:
    input_len: LengthDist
    output_len: LengthDist
    tokens: TokenModel
    name: str = "synthetic"
    needs_text: bool = False

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        while True:
            n_in = int(self.input_len.sample(rng)[0])
            n_out = int(self.output_len.sample(rng)[0])
            yield single(RequestSpec(label="synthetic", max_tokens=n_out,
                                     prompt=make_prompt(rng, self.tokens, n_in),
                                     target_input_tokens=n_in))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "input_tokens": str(self.input_len),
                "output_tokens": str(self.output_len)}


@dataclass
class SharedPrefix:
    """N groups; every request of a group starts with that group's prefix (prefix caching)."""

    groups: int
    prefix_tokens: int
    suffix_len: LengthDist
    output_len: LengthDist
    tokens: TokenModel
    name: str = "prefix"
    needs_text: bool = False

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        if self.groups < 1 or self.prefix_tokens < 1:
            raise ValueError("prefix: --prefix-groups and --prefix-tokens must be >= 1")
        prefixes = [
            random_words(rng, self.tokens.words_for(self.prefix_tokens)) for _ in range(self.groups)
        ]
        while True:
            g = int(rng.integers(0, self.groups))
            n_suffix = int(self.suffix_len.sample(rng)[0])
            suffix = random_words(rng, self.tokens.words_for(n_suffix, with_overhead=False))
            yield single(RequestSpec(
                label=f"group-{g}", max_tokens=int(self.output_len.sample(rng)[0]),
                prompt=prefixes[g] + " " + suffix,
                target_input_tokens=self.prefix_tokens + n_suffix))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "prefix_groups": self.groups,
                "prefix_tokens": self.prefix_tokens, "suffix_tokens": str(self.suffix_len),
                "output_tokens": str(self.output_len)}


SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                       "email": {"type": "string"}},
        "required": ["name", "age"],
    },
    "order": {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "items": {"type": "array", "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"]}},
            "total": {"type": "number"},
        },
        "required": ["order_id", "items"],
    },
    "event": {
        "type": "object",
        "properties": {"title": {"type": "string"}, "date": {"type": "string"},
                       "attendees": {"type": "array", "items": {"type": "string"}}},
        "required": ["title", "date"],
    },
}


@dataclass
class Structured:
    """Requests constrained by a JSON schema (`response_format: json_schema`), label = schema."""

    input_len: LengthDist
    output_len: LengthDist
    tokens: TokenModel
    name: str = "structured"
    needs_text: bool = False

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        names = sorted(SCHEMAS)
        while True:
            schema_name = names[int(rng.integers(0, len(names)))]
            n_in = int(self.input_len.sample(rng)[0])
            ask = f"Return one {schema_name} as JSON. Context:"
            filler = random_words(rng, self.tokens.words_for(n_in - len(ask.split())))
            yield single(RequestSpec(
                label=schema_name, max_tokens=int(self.output_len.sample(rng)[0]),
                prompt=f"{ask} {filler}", target_input_tokens=n_in,
                extra={"response_format": {"type": "json_schema", "json_schema": {
                    "name": schema_name, "schema": SCHEMAS[schema_name]}}}))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "schemas": sorted(SCHEMAS),
                "input_tokens": str(self.input_len), "output_tokens": str(self.output_len)}
