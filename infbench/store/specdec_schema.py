"""Speculative decoding's fields in ``engine_steps`` (schema version 17).

The reference engine's step log carries, per step (reference_engine/spec_decode.py):

``spec_draft_tokens``
    Draft tokens the step verified (over every sequence that carried drafts).
``spec_accepted_tokens``
    Of which the target accepted (the bonus tokens not included), counted before an EOS or
    the length cap cut a sequence's tokens, as vLLM's counters count them.

With ``decode_seqs`` they give the tokens a decode step produced (``decode_seqs +
spec_accepted_tokens``, an EOS cut aside). NULL on rows from an engine that does not log
them (older stores, real engines, the bundled engine without speculation).
"""

from __future__ import annotations

SPEC_STEP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("spec_draft_tokens", "INTEGER"),
    ("spec_accepted_tokens", "INTEGER"),
)

SPEC_MIGRATION_DESCRIPTION = "engine steps carry speculative decoding's drafted and accepted tokens"
