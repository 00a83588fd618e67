"""The one error the link probe and the nccl-tests import raise: its message is one line."""

from __future__ import annotations


class LinkProbeError(Exception):
    """A probe that cannot run as asked, or a file that cannot be read; one line."""
