"""The errors a hang capture raises: each message is one line naming what was wrong."""

from __future__ import annotations


class CaptureError(Exception):
    """Input that cannot be captured or read as asked (bad URL, folder, dump); one line."""


class DumpRefused(CaptureError):
    """A dump that asks to run code when unpickled: refused before anything in it runs."""
