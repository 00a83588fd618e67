"""Gate rules: what to compare and how much worse is still acceptable.

A rules file is TOML::

    [gate]                       # all optional
    confidence = 0.95            # two-sided level of every interval
    inconclusive = "fail"        # what an inconclusive verdict does to the exit code
    replicates = 2000            # bootstrap replicates per run
    min_requests = 30            # fewer good requests than this: inconclusive
    seed = 0
    run_noise = "2%"             # run-to-run spread of any statistic on this machine (relative sd
                                 # of one run); `infbench gate noise RUN RUN RUN` measures it

    [[rule]]
    metric = "e2el"              # see METRICS
    statistic = "p50"            # mean | median | pNN for latencies; throughput | goodput for rates
    max_regression = "5%"        # relative, or an absolute amount in the metric's unit ("3ms", 12.5);
                                 # printed as the limit on the change: <= +5% (or >= -5% when
                                 # higher is better)
    direction = "lower"          # which way is better; defaults per metric
    method = "bootstrap"         # or "rank": a location shift (p50 of per-request metrics; docs/guides/ci-gates.md)
    slo = "ttft=500ms,tpot=50ms" # goodput only; default: the runs' own --slo
    run_noise = "0%"             # this statistic's own run-to-run drift (default: [gate]'s)

Every error is a `RulesError` naming the field that is wrong.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench.gate.stats import DEFAULT_REPLICATES, parse_statistic
from infbench.slo import parse_slo


class RulesError(ValueError):
    """A rules file or rule option is wrong; the message names the field."""


@dataclass(frozen=True)
class MetricKind:
    family: str  # request | itl | step | rate
    unit: str
    better: str  # lower | higher
    help: str


METRICS: dict[str, MetricKind] = {
    "ttft": MetricKind("request", "ms", "lower", "time to first token from the actual send"),
    "ttft_intended": MetricKind("request", "ms", "lower", "time to first token from the intended send"),
    "tpot": MetricKind("request", "ms", "lower", "time per output token after the first"),
    "e2el": MetricKind("request", "ms", "lower", "end-to-end latency from the actual send"),
    "e2el_intended": MetricKind("request", "ms", "lower", "end-to-end latency from the intended send"),
    "itl": MetricKind("itl", "ms", "lower", "gaps between content chunks (resampled by request)"),
    "step_time": MetricKind("step", "ms", "lower", "engine decode-only step duration (server step log)"),
    "requests": MetricKind("rate", "req/s", "higher", "completed requests per second"),
    "output_tokens": MetricKind("rate", "tok/s", "higher", "output tokens per second"),
    "total_tokens": MetricKind("rate", "tok/s", "higher", "input + output tokens per second"),
}
RATE_STATISTICS = ("throughput", "goodput")
METHODS = ("bootstrap", "rank")
INCONCLUSIVE = ("pass", "fail")
_ABS = re.compile(r"^([0-9]*\.?[0-9]+)\s*(ms|s|us|/s)?$")
_UNIT_SCALE = {"ms": 1.0, "s": 1000.0, "us": 0.001}


@dataclass(frozen=True)
class Rule:
    metric: str
    statistic: str
    max_regression: float  # a fraction when relative, else in the metric's unit
    relative: bool
    direction: str
    method: str = "bootstrap"
    slo_ms: dict[str, float] | None = None
    name: str = ""
    run_noise: float | None = None  # overrides [gate] run_noise for this rule

    @property
    def quantile(self) -> float | None:
        return None if self.statistic in RATE_STATISTICS else parse_statistic(self.statistic)

    @property
    def label(self) -> str:
        return self.name or f"{self.metric} {self.statistic}"

    @property
    def tolerance_text(self) -> str:
        if self.relative:
            return f"{self.max_regression:.1%}"
        return f"{self.max_regression:g} {METRICS[self.metric].unit}"

    @property
    def limit(self) -> float:
        """The worst acceptable change (candidate - baseline, or candidate / baseline - 1),
        signed like every change the gate prints: +tolerance when lower is better."""
        return self.max_regression if self.direction == "lower" else -self.max_regression

    @property
    def limit_text(self) -> str:
        """`<= +5.0%` or `>= -5.0%`: the limit beside the change it bounds."""
        op = "<=" if self.direction == "lower" else ">="
        return f"{op} {format_change(self.limit, self.relative, METRICS[self.metric].unit)}"


def format_change(v: float, relative: bool, unit: str) -> str:
    """A signed change, as every gate output prints it: `+3.2%` or `-1.5 ms`."""
    return f"{v:+.1%}" if relative else f"{v:+.3g} {unit}"


@dataclass(frozen=True)
class GateSettings:
    confidence: float = 0.95
    inconclusive: str = "fail"
    replicates: int = DEFAULT_REPLICATES
    min_requests: int = 30
    seed: int = 0
    # Request-level resampling sees only the noise inside a run. Two runs on a shared machine
    # also differ by drift (other load, clocks, thermal state); this relative sd per run is
    # added to every comparison so an A/A pair does not read as a regression.
    run_noise: float = 0.0


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    settings: GateSettings = field(default_factory=GateSettings)


DEFAULT_RULES = (
    {"metric": "ttft", "statistic": "p50", "max_regression": "10%"},
    {"metric": "tpot", "statistic": "p50", "max_regression": "5%"},
    {"metric": "e2el", "statistic": "p50", "max_regression": "5%"},
    {"metric": "output_tokens", "statistic": "throughput", "max_regression": "5%"},
)


def parse_tolerance(raw: Any, metric: str, where: str) -> tuple[float, bool]:
    if isinstance(raw, bool):
        raise RulesError(f"{where}.max_regression: expected a percentage or an amount, got {raw!r}")
    if isinstance(raw, int | float):
        value, relative = float(raw), False
    elif isinstance(raw, str) and raw.strip().endswith("%"):
        try:
            value = float(raw.strip()[:-1]) / 100.0
        except ValueError:
            raise RulesError(f"{where}.max_regression: {raw!r} is not a percentage like 5%") from None
        relative = True
    elif isinstance(raw, str):
        m = _ABS.match(raw.strip().lower())
        unit = METRICS[metric].unit
        if not m:
            raise RulesError(f"{where}.max_regression: {raw!r} is not like 5% or an amount in {unit}")
        suffix = m.group(2)
        if suffix and (unit != "ms") != (suffix == "/s"):
            raise RulesError(f"{where}.max_regression: {raw!r} has the wrong unit for {metric} ({unit})")
        value = float(m.group(1)) * (_UNIT_SCALE.get(suffix or "ms", 1.0) if unit == "ms" else 1.0)
        relative = False
    else:
        raise RulesError(f"{where}.max_regression: expected a percentage or an amount, got {raw!r}")
    if not value >= 0:
        raise RulesError(f"{where}.max_regression: must be >= 0, got {raw!r}")
    return value, relative


_RULE_KEYS = {"metric", "statistic", "max_regression", "direction", "method", "slo", "name", "run_noise"}


def parse_rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise RulesError(f"{where}: expected a table of rule fields")
    unknown = sorted(set(raw) - _RULE_KEYS)
    if unknown:
        raise RulesError(f"{where}.{unknown[0]}: unknown field (expected {', '.join(sorted(_RULE_KEYS))})")
    metric = raw.get("metric")
    if metric not in METRICS:
        raise RulesError(f"{where}.metric: {metric!r} is not one of {', '.join(METRICS)}")
    kind = METRICS[metric]
    statistic = str(raw.get("statistic", "throughput" if kind.family == "rate" else "p50")).lower()
    if kind.family == "rate":
        if statistic not in RATE_STATISTICS:
            raise RulesError(f"{where}.statistic: {statistic!r} does not apply to {metric} "
                             f"(use {' or '.join(RATE_STATISTICS)})")
        if statistic == "goodput" and metric != "requests":
            raise RulesError(f"{where}.statistic: goodput counts requests; use metric = \"requests\"")
    else:
        try:
            parse_statistic(statistic)
        except ValueError as exc:
            raise RulesError(f"{where}.statistic: {exc}") from None
    if "max_regression" not in raw:
        raise RulesError(f"{where}.max_regression: required (e.g. \"5%\")")
    tol, relative = parse_tolerance(raw["max_regression"], metric, where)
    direction = raw.get("direction", kind.better)
    if direction not in ("lower", "higher"):
        raise RulesError(f"{where}.direction: {direction!r} is not lower or higher (which way is better)")
    method = raw.get("method", "bootstrap")
    if method not in METHODS:
        raise RulesError(f"{where}.method: {method!r} is not one of {', '.join(METHODS)}")
    if method == "rank" and (kind.family != "request" or parse_statistic(statistic) != 0.5):
        raise RulesError(f"{where}.method: rank compares locations, so it needs a per-request "
                         "latency metric with statistic p50")
    slo = None
    if "slo" in raw:
        if statistic != "goodput":
            raise RulesError(f"{where}.slo: only a goodput rule takes an slo")
        try:
            slo = parse_slo(str(raw["slo"]))
        except ValueError as exc:
            raise RulesError(f"{where}.{exc}") from None
    name = raw.get("name", "")
    if not isinstance(name, str):
        raise RulesError(f"{where}.name: expected a string")
    noise = parse_noise(raw["run_noise"], f"{where}.run_noise") if "run_noise" in raw else None
    return Rule(metric, statistic, tol, relative, direction, method, slo, name, noise)


def parse_noise(raw: Any, where: str) -> float:
    if isinstance(raw, str) and raw.strip().endswith("%"):
        try:
            noise = float(raw.strip()[:-1]) / 100.0
        except ValueError:
            raise RulesError(f"{where}: {raw!r} is not a percentage like 2%") from None
    elif isinstance(raw, int | float) and not isinstance(raw, bool):
        noise = float(raw)
    else:
        raise RulesError(f"{where}: expected a percentage like 2%, got {raw!r}")
    if not 0.0 <= noise < 1.0:
        raise RulesError(f"{where}: must be in [0%, 100%), got {raw!r}")
    return noise


def parse_settings(raw: Any) -> GateSettings:
    if not isinstance(raw, dict):
        raise RulesError("gate: expected a table")
    allowed = {"confidence", "inconclusive", "replicates", "min_requests", "seed", "run_noise"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise RulesError(f"gate.{unknown[0]}: unknown field (expected {', '.join(sorted(allowed))})")
    conf = raw.get("confidence", 0.95)
    if isinstance(conf, bool) or not isinstance(conf, int | float) or not 0.5 <= conf < 1.0:
        raise RulesError(f"gate.confidence: must be in [0.5, 1), got {conf!r}")
    inc = raw.get("inconclusive", "fail")
    if inc not in INCONCLUSIVE:
        raise RulesError(f"gate.inconclusive: {inc!r} is not pass or fail")
    for key, lo in (("replicates", 200), ("min_requests", 2), ("seed", 0)):
        v = raw.get(key, getattr(GateSettings, key))
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise RulesError(f"gate.{key}: must be an integer >= {lo}, got {v!r}")
    noise = parse_noise(raw.get("run_noise", 0.0), "gate.run_noise")
    return GateSettings(float(conf), inc, int(raw.get("replicates", DEFAULT_REPLICATES)),
                        int(raw.get("min_requests", 30)), int(raw.get("seed", 0)), noise)


def parse_rules(doc: dict[str, Any]) -> RuleSet:
    unknown = sorted(set(doc) - {"gate", "rule"})
    if unknown:
        raise RulesError(f"{unknown[0]}: unknown section (expected [gate] and [[rule]])")
    settings = parse_settings(doc.get("gate", {}))
    raw_rules = doc.get("rule", [])
    if not isinstance(raw_rules, list) or not raw_rules:
        raise RulesError("rule: the file needs at least one [[rule]] table")
    return RuleSet(tuple(parse_rule(r, f"rule[{i}]") for i, r in enumerate(raw_rules)), settings)


def load_rules(path: Path | None) -> RuleSet:
    """The rules in `path`, or the default rules when no file is given."""
    if path is None:
        return RuleSet(tuple(parse_rule(r, f"default rule[{i}]") for i, r in enumerate(DEFAULT_RULES)))
    if not path.is_file():
        raise RulesError(f"rules: {path} does not exist")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"rules: {path} is not valid TOML ({exc})") from None
    return parse_rules(doc)
