"""Schema version 5: captured engine configurations and config bisections.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration after version 4.

``configs``
    One row per captured configuration (``infbench config capture``, or automatically by
    ``infbench run`` when the target exposes its config): ``config_id``, ``created_at``,
    ``engine`` (``vllm``, ``sglang``, ``trtllm``, ``reference``, or ``unknown`` for a plain
    OpenAI endpoint), ``version`` (as the engine printed it; NULL when nothing said),
    ``source_kind`` (``vllm_log``, ``vllm_collect_env``, ``sglang_log``, ``trtllm_yaml``,
    ``engine_endpoint``, ``live_endpoint``), ``source`` (the file path or URL), ``label``
    (a name the user gave it), ``run_id`` (the run it was captured for, NULL for a capture
    on its own), ``digest`` (a hash of the values: equal digests mean equal configurations)
    and ``notes`` (JSON list of what the parser could not place).
``config_values``
    One row per setting: ``key`` (the normalised name, one key space across versions and
    engines, nested settings flattened with dots), ``value`` (JSON text), ``origin``
    (``set``: the user set it, as the engine's non-default args or config file say;
    ``default``: the engine reports it at its default; ``resolved``: the engine printed the
    effective value without saying which), ``raw_key`` (the name as the source spelled it)
    and ``source_line`` (1-based line of the source it came from; NULL for endpoints).
    Secrets (API keys, tokens) are masked before they are stored: ``value`` is
    ``"<masked>"``.
``bisections``
    One row per ``infbench config bisect``: ``bisection_id``, ``created_at``,
    ``good_config_id`` / ``bad_config_id``, ``launch`` (the command template), ``workload``
    (JSON: the load each probe ran), ``budget_runs`` (the most probe runs it announced),
    ``status`` (``running``, ``found``, ``not_reproduced``, ``inconclusive``, ``failed``),
    ``culprit`` (JSON list of the keys found to cause the regression) and ``result`` (JSON:
    every step taken, with the measured change and the verdict).
``bisect_probes``
    One row per probe run of a bisection: ``probe_idx`` (in the order run), ``run_id``,
    ``config_id`` (the configuration it launched), ``applied`` (JSON list of the differing
    keys taken from the bad side), ``verdict`` (the gate's ``pass``, ``fail`` or
    ``inconclusive`` against the good side) and ``reason``.
"""

from __future__ import annotations

CONFIG_MIGRATION_DESCRIPTION = (
    "configs and config_values: captured engine configurations; bisections and bisect_probes: "
    "config bisections with every probe run"
)

CONFIG_DDL: tuple[str, ...] = (
    "CREATE TABLE configs (config_id VARCHAR PRIMARY KEY, created_at TIMESTAMP NOT NULL, "
    "engine VARCHAR NOT NULL, version VARCHAR, source_kind VARCHAR NOT NULL, source VARCHAR, "
    "label VARCHAR, run_id VARCHAR, digest VARCHAR NOT NULL, notes VARCHAR)",
    "CREATE TABLE config_values (config_id VARCHAR NOT NULL, key VARCHAR NOT NULL, "
    "value VARCHAR, origin VARCHAR NOT NULL, raw_key VARCHAR, source_line INTEGER)",
    "CREATE TABLE bisections (bisection_id VARCHAR PRIMARY KEY, created_at TIMESTAMP NOT NULL, "
    "good_config_id VARCHAR, bad_config_id VARCHAR, launch VARCHAR, workload VARCHAR, "
    "budget_runs INTEGER, status VARCHAR NOT NULL, culprit VARCHAR, result VARCHAR)",
    "CREATE TABLE bisect_probes (bisection_id VARCHAR NOT NULL, probe_idx INTEGER NOT NULL, "
    "run_id VARCHAR, config_id VARCHAR, applied VARCHAR, verdict VARCHAR, reason VARCHAR)",
)
