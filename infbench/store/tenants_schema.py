"""Tenants and LoRA adapters in the store (schema version 18).

``requests`` gains:

``tenant``
    Who sent the request (`infbench run --tenants`, sent as the body's ``user``); NULL for a
    run without tenants.
``adapter``
    The model name the request asked for when it was not the run's model (`--adapters`: a
    LoRA adapter served under its own name); NULL for the base model.

``engine_steps`` gains the reference engine's LoRA fields (reference_engine/lora.py):

``lora_adapters``
    Distinct adapters in the step's batch (the base model not counted).
``lora_waiting``
    Requests waiting at the step's end only because their adapter had no slot: the batch
    already held ``max_loras`` other adapters (vLLM admits no more; they wait their turn).
``lora_ms``
    Milliseconds the step spent on the adapters' shrink and expand kernels.
``max_loras``
    The engine's setting: distinct adapters a batch may hold.

The step columns are NULL on rows from an engine that does not log them (older stores, real
engines, the bundled engine without ``--enable-lora``).

The ``request_latency`` view is recreated with ``tenant`` and ``adapter`` beside ``label``.
"""

from __future__ import annotations

TENANT_REQUEST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tenant", "VARCHAR"),
    ("adapter", "VARCHAR"),
)

LORA_STEP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("lora_adapters", "INTEGER"),
    ("lora_waiting", "INTEGER"),
    ("lora_ms", "DOUBLE"),
    ("max_loras", "INTEGER"),
)

TENANTS_MIGRATION_DESCRIPTION = (
    "requests carry their tenant and adapter; engine steps carry the LoRA adapters in the batch, "
    "the requests waiting for an adapter slot, the adapters' cost and max_loras")
