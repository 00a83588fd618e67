"""Suite-wide settings.

Property tests run derandomized by default: the same examples on every machine, so CI's
verdict does not depend on which random examples a run drew. To search for new failing
examples, run with `HYPOTHESIS_PROFILE=explore` (random, 10x the examples); add what it finds
as an `@example` so the default run keeps checking it.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("default", derandomize=True, database=None)
settings.register_profile("explore", max_examples=1000, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
