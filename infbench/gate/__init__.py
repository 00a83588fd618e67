"""CI performance gates: statistical comparison of a candidate run with a baseline.

`samples` reads runs from the store; `compat` checks the runs measured the same load and
pairs their requests when they sent the same ones; `sides` builds each rule's statistic over
a run's (or the pairs') requests; `stats` holds the vectorized resampling and the overlap
correction, `rank` the rank methods; `evaluate` turns a rule and two runs into an interval
and a verdict, `verdict` runs a whole rules file; `rules` parses gates.toml and `rules_file`
writes measured run_noise back into it; `noise` measures run-to-run drift from A/A runs,
`plan` sizes a canary and `report` writes Markdown/JUnit/JSON.
"""

from infbench.gate.evaluate import FAIL, INCONCLUSIVE, PASS, RuleResult, evaluate_rule, overall
from infbench.gate.rules import METRICS, GateSettings, Rule, RulesError, RuleSet, load_rules
from infbench.gate.samples import RunSamples, open_samples

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "METRICS",
    "PASS",
    "GateSettings",
    "Rule",
    "RuleResult",
    "RuleSet",
    "RulesError",
    "RunSamples",
    "evaluate_rule",
    "load_rules",
    "open_samples",
    "overall",
]
