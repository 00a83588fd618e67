"""Synthetic workloads: random lengths, shared-prefix groups, structured output."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from infbench.loadgen.seeds import Streams, integers
from infbench.loadgen.workloads.base import RequestSpec, Session, single
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.prompts import TokenModel
from infbench.loadgen.workloads.schemas import SchemaMix

# --prompt-text: "salted" draws every word of a prompt from the run's salted text stream (an
# n-gram drafter finds little to copy); "repetitive" repeats one phrase of about
# REPEAT_UNIT_TOKENS drawn from that stream for the whole prompt, as code being edited or a
# list being continued repeats itself (prompt-lookup drafts hit).
PROMPT_TEXTS = ("salted", "repetitive")
REPEAT_UNIT_TOKENS = 24


@dataclass
class Synthetic:
    input_len: LengthDist
    output_len: LengthDist
    tokens: TokenModel
    name: str = "synthetic"
    needs_text: bool = False
    prompt_text: str = "salted"

    def sessions(self, streams: Streams) -> Iterator[Session]:
        ins = self.input_len.stream(streams.input_lengths())
        outs = self.output_len.stream(streams.output_lengths())
        text = streams.text()
        for n_in, n_out in zip(ins, outs, strict=True):
            prompt = (self.tokens.text_for(text, n_in) if self.prompt_text == "salted"
                      else self._repetitive(text, n_in))
            yield single(RequestSpec(label="synthetic", max_tokens=n_out, prompt=prompt,
                                     target_input_tokens=n_in, fill=(0, len(prompt))))

    def _repetitive(self, text: Any, n_in: int) -> str:
        # One salted phrase, repeated (and its last words fitted) to the prompt's size.
        body = n_in - self.tokens.overhead - self.tokens.correction(n_in)
        unit = self.tokens.text_for(text, min(REPEAT_UNIT_TOKENS, max(1.0, body)),
                                    with_overhead=False).split()
        return " ".join(self.tokens.fit(unit, body))

    def describe(self) -> dict[str, Any]:
        out = {"workload": self.name, "input_tokens": str(self.input_len),
               "output_tokens": str(self.output_len)}
        if self.prompt_text != "salted":
            out["prompt_text"] = self.prompt_text
        return out


@dataclass
class SharedPrefix:
    """N groups; every request of a group starts with that group's prefix (prefix caching).

    The prefixes come from the run's text stream, so with the per-run salt they are shared
    within a run and differ between runs: a repeated run warms its own groups, not reuses the
    last run's. Group picks and lengths come from their own streams."""

    groups: int
    prefix_tokens: int
    suffix_len: LengthDist
    output_len: LengthDist
    tokens: TokenModel
    name: str = "prefix"
    needs_text: bool = False

    def sessions(self, streams: Streams) -> Iterator[Session]:
        if self.groups < 1 or self.prefix_tokens < 1:
            raise ValueError("prefix: --prefix-groups and --prefix-tokens must be >= 1")
        text = streams.text()
        # A prefix alone would be a prompt of prefix_tokens (BOS and template included), so
        # the suffix is sized as content only and the two add up to the target.
        prefixes = [self.tokens.text_for(text, self.prefix_tokens) for _ in range(self.groups)]
        picks = integers(streams.choices(), self.groups)
        suffixes = self.suffix_len.stream(streams.input_lengths())
        outs = self.output_len.stream(streams.output_lengths())
        for g, n_suffix, n_out in zip(picks, suffixes, outs, strict=True):
            total = self.prefix_tokens + n_suffix
            # The per-length correction belongs to the whole prompt's length, not the prefix's.
            shift = self.tokens.correction(total) - self.tokens.correction(self.prefix_tokens)
            suffix = self.tokens.text_for(text, n_suffix - shift, with_overhead=False)
            head = prefixes[g] + " "
            yield single(RequestSpec(
                label=f"group-{g}", max_tokens=n_out, prompt=head + suffix,
                target_input_tokens=total, fill=(len(head), len(head) + len(suffix))))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "prefix_groups": self.groups,
                "prefix_tokens": self.prefix_tokens, "suffix_tokens": str(self.suffix_len),
                "output_tokens": str(self.output_len)}


MIN_CONTEXT_WORDS = 4

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
    """Requests constrained by a JSON schema (`response_format: json_schema`), label = schema.

    Without `mix`, the three fixed schemas of SCHEMAS; with it, K generated ones of chosen
    sizes, some new to the run (schemas.py)."""

    input_len: LengthDist
    output_len: LengthDist
    tokens: TokenModel
    name: str = "structured"
    needs_text: bool = False
    mix: SchemaMix | None = None

    def sessions(self, streams: Streams) -> Iterator[Session]:
        table = (dict(self.mix.schemas(streams.salt)) if self.mix is not None else SCHEMAS)
        names = sorted(table)
        picks = integers(streams.choices(), len(names))
        ins = self.input_len.stream(streams.input_lengths())
        outs = self.output_len.stream(streams.output_lengths())
        text = streams.text()
        for pick, n_in, n_out in zip(picks, ins, outs, strict=True):
            schema_name = names[pick]
            # The instruction goes after the random context: a fixed opening would be the same
            # first tokens in every request and every run, a prefix-cache hit the salt cannot
            # prevent.
            ask = f"Return one {schema_name} as JSON."
            # At least a few words of context even where the target leaves room for fewer: a
            # one-word opening would repeat across runs (the salt lives in these words).
            budget = max(n_in - self.tokens.content_tokens(ask),
                         self.tokens.overhead + MIN_CONTEXT_WORDS * self.tokens.mean_word_cost)
            context = self.tokens.text_for(text, budget)
            yield single(RequestSpec(
                label=schema_name, max_tokens=n_out, prompt=f"{context}\n{ask}",
                target_input_tokens=n_in, fill=(0, len(context)),
                extra={"response_format": {"type": "json_schema", "json_schema": {
                    "name": schema_name, "schema": table[schema_name]}}}))

    def describe(self) -> dict[str, Any]:
        schemas: Any = sorted(SCHEMAS) if self.mix is None else self.mix.describe()
        return {"workload": self.name, "schemas": schemas,
                "input_tokens": str(self.input_len), "output_tokens": str(self.output_len)}
