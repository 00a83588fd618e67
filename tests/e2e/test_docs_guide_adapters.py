"""The `infbench` examples of docs/guides/adapters.md, run as written, section by section in the guide's order
(how: tests/e2e/docs_runner.py; a file per guide so the guides run side by side)."""

from tests.e2e.docs_runner import guide_test

test_section_runs_as_written = guide_test("docs/guides/adapters.md")
