"""The bundled reference serving engine: a readable engine and a fault-injection lab.

One module per role (see docs/interfaces.md). Importing the package is cheap: torch is
imported only by the torch executor.
"""
