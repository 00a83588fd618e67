"""Typer sub-applications, one module per verb group; `infbench.cli` only wires them."""
