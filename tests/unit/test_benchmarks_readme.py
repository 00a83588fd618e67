"""benchmarks/README.md is generated from benchmarks/results/*.md (`benchmarks/make_readme.py`),
never copied by hand: the committed page is what the script writes from the committed results,
and a figure changed in a result file changes the page."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def make_readme() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_readme", BENCH / "make_readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_readme"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_committed_page_is_what_the_script_writes(make_readme: ModuleType) -> None:
    committed = (BENCH / "README.md").read_text(encoding="utf-8")
    assert committed == make_readme.render(BENCH / "results", BENCH), (
        "benchmarks/README.md is stale: run python benchmarks/make_readme.py")
    # Every result file is on the page, linked.
    for path in (BENCH / "results").glob("*.md"):
        assert f"](results/{path.name})" in committed, path.name


def _write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")


def test_figures_come_from_the_result_files(make_readme: ModuleType, tmp_path: Path) -> None:
    results, scripts = tmp_path / "results", tmp_path / "scripts"
    _write(scripts, "bench_speed.py", 'OUT = "results/speed.md"\n')
    _write(results, "speed.md", "# Speed of a thing\n\nMachine: box, 3 CPUs\n\n"
           "One call costs **41.7 us** of CPU.\n\n"
           "| n | seconds |\n| --- | ---: |\n"
           + "".join(f"| {n} | {n * 0.25:.2f} |\n" for n in range(1, 12)) + "\nafter the table\n")
    _write(results, "alpha.md", "# Alpha\n\nCommand: `python benchmarks/bench_alpha.py --n 3` · 2026-01-02 03:04\n"
           "Machine: other box\n\nNo table here.\n")
    page = make_readme.render(results, scripts)
    # Files in name order; the command from the file, else from the script that writes it.
    assert page.index("## Alpha") < page.index("## Speed of a thing")
    assert "| [Alpha](results/alpha.md) | `python benchmarks/bench_alpha.py --n 3` | 2026-01-02 03:04 |" in page
    assert "Command: `python benchmarks/bench_speed.py`" in page
    assert "Machine: box, 3 CPUs" in page and "One call costs **41.7 us** of CPU." in page
    # The table's first rows as written, the rest counted, nothing after the table taken.
    assert "| 8 | 2.00 |" in page and "| 9 | 2.25 |" not in page
    assert "(3 more rows in the file)" in page and "after the table" not in page
    # A figure changed in the result file is a changed page.
    text = (results / "speed.md").read_text().replace("**41.7 us**", "**39.0 us**")
    _write(results, "speed.md", text)
    changed = make_readme.render(results, scripts)
    assert "**39.0 us**" in changed and "41.7" not in changed


def test_check_fails_on_a_stale_page(make_readme: ModuleType, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "results", "x.md", "# X\n\n| a |\n| --- |\n| 1 |\n")
    monkeypatch.setattr(make_readme, "HERE", tmp_path)
    assert make_readme.main(["--check"]) == 1  # no page yet
    assert make_readme.main([]) == 0 and make_readme.main(["--check"]) == 0
    _write(tmp_path / "results", "x.md", "# X\n\n| a |\n| --- |\n| 2 |\n")
    assert make_readme.main(["--check"]) == 1
