"""The one exception the specs package raises for bad input."""

from __future__ import annotations


class SpecError(ValueError):
    """A one-line message naming the field, name or argument that was wrong."""
