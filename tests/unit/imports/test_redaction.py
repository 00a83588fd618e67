"""Credentials a tool wrote into its file never reach the store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb

from infbench.imports.redaction import REDACTED, redact, redact_command
from tests.unit.imports.support import FIXTURES, import_one


def test_keys_headers_and_flags_are_redacted_counts_are_not() -> None:
    got = redact({"api_key": "sk-1", "token": "t", "max_tokens": 5, "tokenizer": "tok",
                  "headers": {"X-Key": "v"}, "output_tokens": 3, "nested": [{"password": "p"}]})
    assert got == {"api_key": REDACTED, "token": REDACTED, "max_tokens": 5, "tokenizer": "tok",
                   "headers": REDACTED, "output_tokens": 3, "nested": [{"password": REDACTED}]}
    cmd = redact_command("aiperf profile --api-key sk-9 -H 'Authorization: Bearer abc' "
                         "--max-tokens 5 --backend-kwargs {\"api_key\": \"x\"} --token=q")
    assert "sk-9" not in cmd and "abc" not in cmd and '"x"' not in cmd and "=q" not in cmd
    assert "--max-tokens 5" in cmd


def test_an_api_key_in_aiperfs_command_and_config_is_not_stored(tmp_path: Path) -> None:
    d = tmp_path / "a"
    shutil.copytree(FIXTURES / "aiperf", d)
    agg = json.loads((d / "profile_export_aiperf.json").read_text())
    agg["run_info"]["cli_command"] += " --api-key sk-SECRET-1 --header 'Authorization: Bearer SECRET-2'"
    agg["input_config"]["endpoint"]["api_key"] = "SECRET-3"
    (d / "profile_export_aiperf.json").write_text(json.dumps(agg))
    db, _, _ = import_one(tmp_path, "aiperf", d)
    con = duckdb.connect(str(db), read_only=True)
    try:
        text = " ".join(str(v) for row in con.execute("SELECT * FROM runs").fetchall() for v in row)
    finally:
        con.close()
    assert "SECRET" not in text and "--api-key <redacted>" in text
