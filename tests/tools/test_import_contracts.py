"""The allowlist contract: what is listed passes, anything else (a new sibling package, a new
third-party import) breaks it."""

from __future__ import annotations

from grimp import ImportGraph

from tools.import_contracts import AllowlistContract


def _graph(imports: list[tuple[str, str]]) -> ImportGraph:
    g = ImportGraph()
    for m in ("pkg", "pkg.leaf"):
        g.add_module(m)
    for importer, imported in imports:
        for m in (importer, imported):
            if m not in g.modules:
                g.add_module(m, is_squashed=not m.startswith("pkg"))
        g.add_import(importer=importer, imported=imported, line_number=3, line_contents="import x")
    return g


def _check(imports: list[tuple[str, str]], **options: object) -> list[tuple[str, str, list[int]]]:
    contract = AllowlistContract(name="c", session_options={"root_packages": ["pkg"]},
                                 contract_options={"source_modules": ["pkg.leaf"], **options})
    return contract.check(_graph(imports), verbose=False).metadata["bad"]


def test_own_modules_stdlib_and_listed_modules_pass() -> None:
    imports = [("pkg.leaf.a", "pkg.leaf.b"), ("pkg.leaf.a", "json"), ("pkg.leaf.b", "numpy"),
               ("pkg.leaf.b", "pkg.store.db")]
    assert _check(imports, allow_stdlib="true", allowed_modules=["numpy", "pkg.store"]) == []


def test_an_unlisted_sibling_or_library_breaks_it_with_the_line() -> None:
    imports = [("pkg.leaf.a", "pkg.newthing"), ("pkg.leaf.a", "scipy"), ("pkg.leaf.b", "json")]
    bad = _check(imports, allowed_modules=["numpy"])
    assert bad == [("pkg.leaf.a", "pkg.newthing", [3]), ("pkg.leaf.a", "scipy", [3]),
                   ("pkg.leaf.b", "json", [3])]


def test_exact_entry_allows_the_module_not_its_children() -> None:
    bad = _check([("pkg.leaf.a", "pkg"), ("pkg.leaf.a", "pkg.cli")], allowed_exact=["pkg"])
    assert bad == [("pkg.leaf.a", "pkg.cli", [3])]
