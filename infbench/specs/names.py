"""How a name someone typed maps to a catalog entry, so every output can say what it used.

`llama-3.1-70b` is served by the catalog's Llama-3.3-70B-Instruct (same shapes); `h100` is the
SXM part. A calculator that answers for a different entry than the one asked for must say so,
and why, rather than resolve silently.
"""

from __future__ import annotations

from dataclasses import dataclass

EXACT = "exact"  # the catalog's own name, any case or separator
SHORT_NAME = "short name"  # the Hugging Face id without its organisation
ALIAS = "alias"  # another spelling the catalog lists
STAND_IN = "stand-in"  # a different checkpoint the catalog entry answers for; `note` says why
CONFIG_FILE = "config file"  # a config.json the user gave


@dataclass(frozen=True)
class Resolved:
    """The catalog entry (or file) a name resolved to, and why when it is another model."""

    kind: str  # "model" or "gpu"
    requested: str  # as typed
    name: str  # the entry used: a Hugging Face id, a GPU name, or the config.json path
    how: str  # EXACT, SHORT_NAME, ALIAS, STAND_IN or CONFIG_FILE
    note: str | None = None  # why the entry answers for the name, when that is not obvious

    @property
    def renamed(self) -> bool:
        """True when the entry used is not literally what was typed."""
        return self.how != EXACT
