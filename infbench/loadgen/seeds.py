"""The random streams of a run, one per role, all derived from `--seed`.

A single generator for everything made the schedule depend on the text: prompt text takes a
number of draws that follows the target's tokenizer calibration (words per token), so the
same seed sent different lengths and arrival times to different targets. Each role gets its
own stream instead (a NumPy `SeedSequence` child with a fixed spawn key), so a draw in one
never shifts another:

- `arrivals`: the open-loop inter-arrival gaps;
- `input_lengths`, `output_lengths`: the token targets of each request (or turn);
- `choices`: what each request is (shared-prefix group, JSON schema, dataset record order);
- `text`: the prompt words; the only stream whose number of draws depends on the target;
- `tenants`, `adapters`: which tenant sends session k and which adapter (model name) it asks
  for (`--tenants`, `--adapters`): one draw each per session, so session k is the same tenant
  and adapter on any target;
- `for_tenant(i)`: the streams of tenant i's own sessions (its lengths, choices, text), under
  a scope of their own, so one tenant's draws never shift another's.

Prompt text is also salted per run: `salt` (64 random bits, new for every run) enters the
text streams' keys, so a repeated run sends fresh words of the same lengths and is not
served from the target's prefix cache. With `salt=None` (`--reuse-prompts`) the text comes
from the seed alone: the same seed sends byte-identical prompts, to measure cache reuse.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

# Spawn keys, one per role. Renumbering one changes every run's schedule for that role, so
# these values are part of the reproducibility contract: append, never reuse or reorder.
_ARRIVALS, _INPUT, _OUTPUT, _CHOICES, _TEXT, _CONVERSATION_TEXT = range(6)
# Appended for tenants (the key of a scoped stream starts with _TENANT_SCOPE and the tenant).
_TENANTS, _ADAPTERS, _TENANT_SCOPE = 6, 7, 8
_U32 = 0xFFFF_FFFF
SALT_BITS = 64


def new_salt() -> int:
    """A fresh per-run salt (from the OS's randomness, not from the seed)."""
    return secrets.randbits(SALT_BITS)


@dataclass(frozen=True)
class Streams:
    seed: int
    salt: int | None = None  # None: prompts from the seed alone (--reuse-prompts)
    # Prefix of every key: () for the run's streams, (_TENANT_SCOPE, i) for tenant i's.
    scope: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: {self.seed!r} must be an integer >= 0")
        if self.salt is not None and not 0 <= self.salt < 1 << SALT_BITS:
            raise ValueError(f"salt: {self.salt!r} must be an integer in [0, 2^{SALT_BITS})")

    @property
    def salted(self) -> bool:
        return self.salt is not None

    def _generator(self, *key: int) -> np.random.Generator:
        # Every key element stays below 2^32: SeedSequence splits larger ints into 32-bit
        # words, and (1, 2^32) would then collide with (1, 0, 1).
        key = (*self.scope, *key)
        assert all(0 <= k <= _U32 for k in key), key
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=key)))

    def _salt_key(self) -> tuple[int, int, int]:
        # A fixed-length key whose first word says whether there is a salt at all, so no salt
        # value can reproduce the unsalted stream.
        if self.salt is None:
            return (0, 0, 0)
        return (1, self.salt & _U32, self.salt >> 32)

    def arrivals(self) -> np.random.Generator:
        return self._generator(_ARRIVALS)

    def input_lengths(self) -> np.random.Generator:
        return self._generator(_INPUT)

    def output_lengths(self) -> np.random.Generator:
        return self._generator(_OUTPUT)

    def choices(self) -> np.random.Generator:
        return self._generator(_CHOICES)

    def text(self) -> np.random.Generator:
        return self._generator(_TEXT, *self._salt_key())

    def conversation_text(self, conversation: int) -> np.random.Generator:
        """The text of one conversation. Its turns are written when replies arrive, in an
        order that follows the server's timing, so each conversation draws from its own
        stream: with `--reuse-prompts`, conversation k says the same things in every run."""
        if not 0 <= conversation <= _U32:
            raise ValueError(f"conversation: {conversation} is out of range")
        return self._generator(_CONVERSATION_TEXT, *self._salt_key(), conversation)


    def tenants(self) -> np.random.Generator:
        return self._generator(_TENANTS)

    def adapters(self) -> np.random.Generator:
        return self._generator(_ADAPTERS)

    def for_tenant(self, tenant: int) -> Streams:
        """Tenant `tenant`'s streams: the same seed and salt under the tenant's scope."""
        if self.scope:
            raise ValueError("streams: tenant streams cannot be scoped again")
        if not 0 <= tenant <= _U32:
            raise ValueError(f"tenant: {tenant} is out of range")
        return Streams(self.seed, self.salt, (_TENANT_SCOPE, tenant))


def integers(rng: np.random.Generator, high: int, batch: int = 256) -> Iterator[int]:
    """Uniform picks in [0, high), drawn a batch at a time (one NumPy call per `batch`)."""
    while True:
        yield from rng.integers(0, high, batch).tolist()


def weighted(rng: np.random.Generator, weights: list[float], batch: int = 256) -> Iterator[int]:
    """Picks in [0, len(weights)) with probability proportional to `weights`, one uniform
    each (drawn a batch at a time), so the k-th pick depends only on `rng` and the weights."""
    cum = np.cumsum(np.asarray(weights, dtype=np.float64))
    cum /= cum[-1]
    last = len(weights) - 1
    while True:
        yield from np.minimum(np.searchsorted(cum, rng.random(batch), side="right"), last).tolist()
