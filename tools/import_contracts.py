"""An import-linter contract that lists what a package MAY import, not what it may not.

A `forbidden` contract only names the packages someone thought of when writing it; a new
package, or a new third-party dependency, slips through. Each `allowlist` contract says the
rule exactly: the source packages may import themselves, the modules in `allowed_modules`
(and their descendants), and, with `allow_stdlib = true`, Python's standard library. Nothing
else, direct imports counted (an indirect path goes through a module that is itself checked).
`except_modules` leaves sub-packages of a source to a contract of their own (which must say
their rule exactly: it is how one probe may use torch while the others may not).
"""

from __future__ import annotations

import sys

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


class AllowlistContract(Contract):
    type_name = "allowlist"

    source_modules = fields.ListField(subfield=fields.StringField())
    allowed_modules = fields.ListField(subfield=fields.StringField(), required=False, default=[])
    allowed_exact = fields.ListField(subfield=fields.StringField(), required=False, default=[])
    allow_stdlib = fields.BooleanField(required=False, default=False)
    except_modules = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = [str(s) for s in self.source_modules]  # type: ignore[attr-defined]
        allowed = [str(a) for a in self.allowed_modules]  # type: ignore[attr-defined]
        exact = {str(a) for a in self.allowed_exact}  # type: ignore[attr-defined]
        stdlib = bool(self.allow_stdlib)  # type: ignore[attr-defined]
        skip = [str(e) for e in self.except_modules]  # type: ignore[attr-defined]
        bad: list[tuple[str, str, list[int]]] = []
        for source in sources:
            for importer in sorted({source} | graph.find_descendants(source)):
                if any(_within(importer, e) for e in skip):
                    continue
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    top = imported.split(".", 1)[0]
                    if imported in exact or any(_within(imported, p) for p in (*sources, *allowed)):
                        continue
                    if stdlib and top in sys.stdlib_module_names:
                        continue
                    lines = [d["line_number"] for d in graph.get_import_details(
                        importer=importer, imported=imported)]
                    bad.append((importer, imported, lines))
        return ContractCheck(kept=not bad, metadata={"bad": bad})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["bad"]:
            where = ", ".join(f"l.{n}" for n in lines)
            output.print_error(f"{importer} imports {imported} ({where}), which is not allowed")
            output.new_line()
