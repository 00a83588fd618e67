"""`infbench plan`: the serving calculators, each a table of its formula's terms.

`verbs` holds the commands (thin: resolve inputs, call `infbench.specs`, render), `inputs`
the vLLM-named options and name resolution, `rows` what each result shows, `render` how it
is printed; `specdec` (speculative decoding) and `compare` (two GPUs, one workload) are verbs
of their own modules, registered on the same app. Bad input is one line on stderr and exit
code 2, never a traceback.
"""

from infbench.commands.plan import compare as _compare  # noqa: F401  (registers `plan compare`)
from infbench.commands.plan import specdec as _specdec  # noqa: F401  (registers `plan specdec`)
from infbench.commands.plan.verbs import app

__all__ = ["app"]
