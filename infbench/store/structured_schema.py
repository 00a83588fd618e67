"""Structured output's fields in ``engine_steps`` (schema version 16).

The reference engine's step log carries, per step (reference_engine/structured_output.py):

``structured_seqs``
    Sequences that sampled under a grammar mask in the step.
``grammar_mask_ms``
    Milliseconds of mask work the step had (``structured_seqs`` x the cost per sequence).
``grammar_mask_exposed_ms``
    Of which the step paid beyond its forward pass: all of it when the mask blocks the step,
    only what outlasted the forward when it overlaps.
``grammar_mask_blocking``
    The engine's setting: true when the mask is filled before the forward pass (the step
    waits for it), false when it overlaps the forward.
``grammar_waiting``
    Requests waiting for their schema to compile at the step's end (held out of the
    scheduler; the other requests keep stepping).
``grammar_compiles`` / ``grammar_compile_ms``
    Compiles that finished since the previous step, and their milliseconds in total.
``grammar_cache_hits`` / ``grammar_cache_misses``
    Structured requests that entered the engine at the step and found their schema compiled,
    or had to wait for a compile.

All NULL on rows from an engine that does not log them (older stores, real engines).
"""

from __future__ import annotations

STRUCTURED_STEP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("structured_seqs", "INTEGER"),
    ("grammar_mask_ms", "DOUBLE"),
    ("grammar_mask_exposed_ms", "DOUBLE"),
    ("grammar_mask_blocking", "BOOLEAN"),
    ("grammar_waiting", "INTEGER"),
    ("grammar_compiles", "INTEGER"),
    ("grammar_compile_ms", "DOUBLE"),
    ("grammar_cache_hits", "INTEGER"),
    ("grammar_cache_misses", "INTEGER"),
)

STRUCTURED_MIGRATION_DESCRIPTION = (
    "engine steps carry structured output's grammar compiles, cache lookups and token masks")
