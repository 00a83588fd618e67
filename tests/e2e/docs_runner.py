"""How the examples of the README and the guides (`docs/guides/`) are run as written: each
document's `infbench` commands in order, in a scratch directory of its own (a guide is read on
its own, so it may not lean on another's runs), against the known-schedule mock server where
the example names `http://127.0.0.1:8000` (loopback only), with the placeholders a reader would
fill in (`BASE_RUN`, `A1`, `RUN_A`...) replaced by runs the earlier examples made. Two bounds
are added so the suite stays short: `infbench run` against a URL gets `--duration 3`, and
`infbench sweep` gets short points and a low concurrency cap; the bundled-engine main job
(`infbench run`) runs exactly as written. An example's expected exit code is 0 unless its
comment says otherwise ("exits 1", "exit 0 pass, 1 fail").

The README's examples are tests/e2e/test_docs_examples.py; each guide has a test file of its
own (tests/e2e/test_docs_guide_*.py), so pytest-xdist's per-file distribution runs the
documents side by side (together in one file they were one worker's 8 minutes).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from tests.support.cli import ROOT, infbench
from tests.support.docs import bash_blocks, example_docs

PLACEHOLDER_RUNS = ("BASE_RUN", "RUN_A", "RUN_B", "A1", "A2", "A3")
# Verbs the README and the guides must show at least once (checked after every section ran).
README_VERBS = {"run", "runs", "show", "report", "export", "import", "plan", "gate", "compare",
                "sweep", "diagnose", "probe", "config", "trace"}
# The README is the front door: one example for each job, the detail in the job's guide.
FRONT_DOOR_VERBS = {"run", "diagnose", "gate", "config"}

Command = tuple[list[str], set[int]]


def _commands(block: str) -> list[Command]:
    """The `infbench ...` commands of one bash block, with their allowed exit codes."""
    out: list[Command] = []
    joined = re.sub(r"\\\n\s*", " ", block)
    for line in joined.splitlines():
        code, _, comment = line.partition("#")
        codes = {0}
        if "exits 1" in comment:
            codes = {1}
        elif "1 fail" in comment:
            codes = {0, 1}
        for part in re.split(r";|&&", code):
            words = shlex.split(part)
            if words and words[0] == "infbench":
                out.append((words[1:], codes))
    return out


def doc_sections(doc: Path) -> list[tuple[str, list[Command]]]:
    """A document's `## ` sections in order, each with the commands of its bash blocks."""
    sections: list[tuple[str, list[Command]]] = []
    for chunk in re.split(r"^## ", doc.read_text(), flags=re.M)[1:]:
        title = chunk.splitlines()[0]
        commands = [c for block in bash_blocks(chunk) for c in _commands(block)]
        if commands:
            sections.append((title, commands))
    return sections


def readme_commands(docs: list[Path] | None = None) -> list[Command]:
    """Every `infbench ...` command in the documents' bash blocks (all of them by default)."""
    return [c for doc in (example_docs() if docs is None else docs)
            for _, commands in doc_sections(doc) for c in commands]


def _bounded(args: list[str]) -> list[str]:
    if args[0] == "run" and "--url" in args and "--duration" not in args:
        return [*args, "--duration", "3"]
    if args[0] == "sweep":
        return [*args, "--duration", "1.5", "--max-concurrency", "4", "--num-rates", "1"]
    return args


class Workspace:
    """One reader's scratch directory: what earlier sections made, later ones use."""

    # Owns: the scratch directory, the mock server's URL, the placeholder runs once made,
    # and the verbs run so far.
    def __init__(self, cwd: Path, url: str) -> None:
        self.cwd, self.url = cwd, url
        self.fill: dict[str, str] = {}
        self.ran: set[str] = set()

    def run(self, args: list[str], codes: set[int]) -> None:
        args = [a.replace("http://127.0.0.1:8000", self.url) for a in _bounded(args)]
        if any(a in PLACEHOLDER_RUNS for a in args):
            if not self.fill:
                self.fill.update(_placeholders(self.cwd, self.url))
            args = [self.fill.get(a, a) for a in args]
        if args[:2] == ["gate", "noise"] and not (self.cwd / "gates.toml").exists():
            (self.cwd / "gates.toml").write_text((ROOT / "examples/ci/gates.toml").read_text())
        r = infbench(*args, cwd=self.cwd, timeout=300)
        assert r.returncode in codes, (args, r.returncode, r.stderr[-2000:])
        assert "Traceback" not in r.stderr, (args, r.stderr)
        self.ran.add(args[0])


def _workspace(workspaces: dict[Path, Workspace], doc: Path, url: str,
               factory: pytest.TempPathFactory) -> Workspace:
    """The document's own scratch directory, made when its first section runs."""
    if doc not in workspaces:
        cwd = factory.mktemp(re.sub(r"[^a-z0-9]+", "-", doc.stem.lower()))
        (cwd / "examples").symlink_to(ROOT / "examples")
        workspaces[doc] = Workspace(cwd, url)
    return workspaces[doc]


def _placeholders(cwd: Path, url: str) -> dict[str, str]:
    """Runs a reader would name: a baseline and repeats of the same workload as the last run
    (the gate refuses different workloads), made with the README's own run example."""
    def same_as_last() -> list[str]:
        if not (cwd / "infbench.duckdb").exists():  # a guide whose first example is a gate
            return []
        con = duckdb.connect(str(cwd / "infbench.duckdb"), read_only=True)
        try:
            return [r[0] for r in con.execute(
                "SELECT run_id FROM runs WHERE status = 'completed' AND workload_fingerprint = "
                "(SELECT workload_fingerprint FROM runs ORDER BY created_at DESC LIMIT 1) "
                "ORDER BY created_at").fetchall()]
        finally:
            con.close()

    while len(ids := same_as_last()) < 4:
        r = infbench("run", "--url", url, "--seed", "7", "--reuse-prompts", "--duration", "3",
                     cwd=cwd)
        assert r.returncode == 0, r.stderr
    return {"BASE_RUN": ids[0], "RUN_A": ids[0], "RUN_B": ids[1],
            "A1": ids[1], "A2": ids[2], "A3": ids[3]}


def section_ids(doc: Path, sections: list[tuple[str, list[Command]]]) -> list[str]:
    return [f"{doc.stem}-" + re.sub(r"[^a-z0-9]+", "-", t.lower()).strip("-")[:40] for t, _ in sections]


def run_section(workspaces: dict[Path, Workspace], server: str, factory: pytest.TempPathFactory,
                doc: Path, commands: list[Command]) -> None:
    """One section of `doc`, in the document's scratch directory (sections run in order)."""
    workspace = _workspace(workspaces, doc, server, factory)
    for args, codes in commands:
        workspace.run(args, codes)
    assert {args[0] for args, _ in commands} <= workspace.ran


def guide_file(doc: Path) -> Path:
    """The test file that runs a guide's examples."""
    return Path(__file__).parent / f"test_docs_guide_{doc.stem.replace('-', '_')}.py"


def guide_test(relative: str) -> Callable[..., None]:
    """The test of one guide: a test per `## ` section in the guide's order, sharing its
    scratch directory (a test file assigns it to a `test_...` name)."""
    doc = ROOT / relative
    sections = doc_sections(doc)

    @pytest.mark.e2e
    @pytest.mark.parametrize("title, commands", sections, ids=section_ids(doc, sections))
    def test(docs_workspaces: dict[Path, Workspace], docs_server: str,
             tmp_path_factory: pytest.TempPathFactory, title: str,
             commands: list[Command]) -> None:
        run_section(docs_workspaces, docs_server, tmp_path_factory, doc, commands)

    return test
