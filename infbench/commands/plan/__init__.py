"""`infbench plan`: the serving calculators, each a table of its formula's terms.

`verbs` holds the commands (thin: resolve inputs, call `infbench.specs`, render), `inputs`
the vLLM-named options and name resolution, `rows` what each result shows, `render` how it
is printed. Bad input is one line on stderr and exit code 2, never a traceback.
"""

from infbench.commands.plan.verbs import app

__all__ = ["app"]
