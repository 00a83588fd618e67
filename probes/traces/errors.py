"""The one error a trace import or analysis raises: its message is one line naming the file."""

from __future__ import annotations


class TraceError(Exception):
    """A trace that cannot be read or analysed as asked; the message is one line."""
