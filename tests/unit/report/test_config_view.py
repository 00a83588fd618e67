"""`show` lists the configuration: flattened keys, the engine's non-default settings only."""

from __future__ import annotations

from infbench.report.config_view import config_rows


def test_nested_keys_are_dotted_and_engine_defaults_are_counted_not_listed() -> None:
    cfg = {"arrivals": {"kind": "closed", "concurrency": 16}, "seed": 3,
           "engine_config": {"max_num_seqs": {"value": 8, "default": False},
                             "block_size": {"value": 16, "default": True},
                             "gpu": {"value": "H100-SXM", "default": True}},
           "target": {"engine_args": ["--max-num-seqs", "8"], "url": "http://127.0.0.1:1"},
           "slo_ms": {}}
    rows = dict(config_rows(cfg))
    assert rows["arrivals.kind"] == "closed" and rows["arrivals.concurrency"] == "16"
    assert rows["engine_config.max_num_seqs"] == "8"
    assert "engine_config.block_size" not in rows
    assert rows["engine_config"].startswith("2 settings at their defaults")
    assert rows["target.engine_args"] == '["--max-num-seqs", "8"]'
    assert rows["slo_ms"] == "{}" and rows["seed"] == "3"
