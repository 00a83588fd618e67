"""CI performance gates: statistical comparison of a candidate run with a baseline.

`samples` reads runs from the store, `stats` holds the vectorized resampling, `rules` parses
gates.toml, `evaluate` turns a rule and two runs into a verdict, `compat` checks the runs
measured the same load, `report` writes Markdown/JUnit/JSON and `plan` sizes a canary.
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
