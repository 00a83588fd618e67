"""What one measured run is asked for, in typed groups that check their own values: the target,
the workload, the load's stop and sampling, the telemetry beside it, and the whole request.

`run` and `sweep` build the same groups from their options (a sweep point differs only in its
arrivals) and the cap test builds them from a stored run, so a value is checked in one place,
before any engine is started or anything is sent. Nothing here talks to a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.fleet.replicas import (
    Replica,
    RoutePolicy,
    parse_replicas,
    parse_route,
    read_targets,
)
from infbench.loadgen.http.bodies import ENDPOINTS
from infbench.loadgen.preflight import Target
from infbench.loadgen.seeds import Streams
from infbench.loadgen.telemetry.exposition import bind_socket, parse_bind
from infbench.loadgen.telemetry.watch import WatchSettings
from infbench.loadgen.workers.scale import REFUSED as WORKERS_REFUSED
from infbench.loadgen.workers.scale import Scale
from infbench.loadgen.workloads import Workload
from infbench.loadgen.workloads.build import build_workload, check_tenants, with_tenants
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.schemas import SchemaMix
from infbench.loadgen.workloads.synthetic import PROMPT_TEXTS
from infbench.loadgen.workloads.tenant_spec import (
    AdapterMix,
    TenantSpec,
    parse_adapters,
    parse_tenants,
)
from probes.gpu.run_probe import DEFAULT_INTERVAL_S as GPU_INTERVAL_S
from probes.prometheus.client import PrometheusClient, connect

DEFAULT_DURATION_S = 30.0
DEFAULT_INPUT_TOKENS = "uniform:256:1024"
DEFAULT_PREFIX_GROUPS = 4
DEFAULT_PREFIX_TOKENS = 512
DEFAULT_TURNS = 3
DEFAULT_SCHEMA_FIELDS = "12"
DEFAULT_CLOSED_SLOTS = 8


@dataclass(frozen=True)
class TargetSpec:
    """Where the load goes: one URL (None: the bundled engine) or a fleet of replicas."""

    url: str | None
    model: str | None = None
    endpoint: str = "completions"
    metrics_url: str | None = None
    engine_args: list[str] = field(default_factory=list)  # the bundled engine's
    replicas: list[Replica] = field(default_factory=list)
    route: RoutePolicy = field(default_factory=lambda: RoutePolicy("round-robin"))
    # Sent as a header only: never part of the stored configuration, a log line or a repr.
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint: {self.endpoint!r} is not one of {', '.join(ENDPOINTS)}")

    @classmethod
    def from_options(cls, urls: list[str], *, targets: Path | None = None, route: str | None = None,
                     api_key: str | None, model: str | None, endpoint: str,
                     metrics_url: str | None, engine_args: list[str]) -> TargetSpec:
        """`--url` (repeated for a fleet, NAME=URL), `--targets FILE`, `--route` and the rest."""
        if targets is not None and urls:
            raise ValueError("targets: give the replicas with --url or in --targets, not both")
        replicas = read_targets(targets) if targets is not None else (
            parse_replicas(urls) if len(urls) > 1 else [])
        if not replicas:
            if route is not None:
                raise ValueError("route: routing needs a fleet (--url A --url B ..., or --targets FILE)")
            return cls(urls[0] if urls else None, model, endpoint, metrics_url, list(engine_args),
                       api_key=api_key)
        if metrics_url is not None:
            raise ValueError("metrics-url: a fleet scrapes each replica's URL/metrics; give a "
                             "replica's dcgm-exporter endpoint in --targets (dcgm=URL)")
        return cls(None, model, endpoint, None, list(engine_args), replicas,
                   parse_route(route or "round-robin", replicas), api_key)

    @property
    def bundled(self) -> bool:
        return self.url is None and not self.replicas

    @property
    def first_url(self) -> str | None:
        """The URL preflight starts from: the first replica's, the one target's, or None."""
        return self.replicas[0].url if self.replicas else self.url


@dataclass(frozen=True)
class WorkloadSpec:
    """What each request sends: the workload kind, its lengths and its shape or source."""

    kind: str
    input_len: LengthDist
    output_len: LengthDist | None = None  # None: the workload's own default
    prefix_groups: int = DEFAULT_PREFIX_GROUPS
    prefix_tokens: int = DEFAULT_PREFIX_TOKENS
    turns: int = DEFAULT_TURNS
    dataset: Path | None = None
    trace: Path | None = None
    time_scale: float = 1.0
    trace_start: float = 0.0
    trace_end: float | None = None
    schemas: SchemaMix | None = None  # structured: generated schemas (workloads/schemas.py)
    prompt_text: str = "salted"  # synthetic: salted or repetitive text (workloads/synthetic.py)
    tenants: tuple[TenantSpec, ...] = ()  # --tenants (workloads/tenant_spec.py)
    adapters: AdapterMix | None = None    # --adapters

    @classmethod
    def parse(cls, kind: str, input_tokens: str, output_tokens: str | None, *,
              prefix_groups: int = DEFAULT_PREFIX_GROUPS, prefix_tokens: int = DEFAULT_PREFIX_TOKENS,
              turns: int = DEFAULT_TURNS, dataset: Path | None = None, trace: Path | None = None,
              time_scale: float = 1.0, trace_start: float = 0.0,
              trace_end: float | None = None, schemas: int | None = None,
              schema_fields: str | None = None, new_schemas: float | None = None,
              prompt_text: str = "salted", tenants: str | None = None,
              adapters: str | None = None) -> WorkloadSpec:
        """Lengths as `--input-tokens`/`--output-tokens` give them (512, uniform:LOW:HIGH, ...)."""
        if prompt_text not in PROMPT_TEXTS:  # before a bundled engine is started for nothing
            raise ValueError(f"prompt_text: must be one of {', '.join(PROMPT_TEXTS)}, "
                             f"got {prompt_text!r}")
        who = parse_tenants(tenants) if tenants is not None else ()
        check_tenants(kind, who)  # before a bundled engine is started for nothing
        return cls(kind, LengthDist.parse(input_tokens, "input_tokens"),
                   None if output_tokens is None else LengthDist.parse(output_tokens, "output_tokens"),
                   prefix_groups, prefix_tokens, turns, dataset, trace, time_scale, trace_start,
                   trace_end, schema_mix(schemas, schema_fields, new_schemas), prompt_text, who,
                   parse_adapters(adapters, who) if adapters is not None else None)

    def build(self, target: Target) -> Workload:
        """The workload for this target (its token model sizes the prompts), files read;
        with tenants or adapters, the mix over them (`workloads.tenants`)."""
        def one(input_len: LengthDist, output_len: LengthDist | None) -> Workload:
            return build_workload(
                self.kind, input_len=input_len, output_len=output_len, target=target,
                prefix_groups=self.prefix_groups, prefix_tokens=self.prefix_tokens,
                turns=self.turns, dataset=self.dataset, trace=self.trace,
                time_scale=self.time_scale, trace_start=self.trace_start,
                trace_end=self.trace_end, schemas=self.schemas, prompt_text=self.prompt_text)

        return with_tenants(one, self.kind, self.input_len, self.output_len, self.tenants,
                            self.adapters, target)


def schema_mix(count: int | None, fields: str | None, new_share: float | None) -> SchemaMix | None:
    """`--schemas K --schema-fields N|DIST --new-schemas SHARE`; the last two need the first."""
    if count is None:
        if fields is not None or new_share is not None:
            raise ValueError("schema_fields/new_schemas: --schema-fields and --new-schemas go "
                             "with --schemas K")
        return None
    return SchemaMix(count, LengthDist.parse(fields or DEFAULT_SCHEMA_FIELDS, "schema_fields"),
                     1.0 if new_share is None else new_share)


@dataclass(frozen=True)
class LoadSpec:
    """When sending stops, what the summary leaves out, how each request is sampled, and the
    objectives goodput is counted against. The arrivals are the request's own."""

    duration_s: float | None
    num_requests: int | None = None
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    timeout_s: float = 300.0
    seed: int = 0
    reuse_prompts: bool = False  # the seed's own text, not salted per run
    temperature: float = 0.0
    ignore_eos: bool = True
    slo_ms: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        Streams(self.seed)  # a bad seed fails here, before an engine is started


def arrivals_from_options(arrival: str | None, workload: str, *, rate: float, burstiness: float,
                          concurrency: int | None, time_scale: float) -> Arrivals:
    """`run`'s arrival options: poisson unless asked (trace for --workload trace); closed loop
    gets 8 slots, an open loop no in-flight cap, unless --concurrency says."""
    kind = arrival or ("trace" if workload == "trace" else "poisson")
    if kind == "trace" and workload != "trace":
        raise ValueError("arrival: trace timestamps need --workload trace")
    conc = concurrency if concurrency is not None else (DEFAULT_CLOSED_SLOTS if kind == "closed" else 0)
    arrivals = Arrivals(kind, rate=rate, burstiness=burstiness, concurrency=conc, time_scale=time_scale)
    arrivals.validate()
    return arrivals


def default_duration(duration_s: float | None, num_requests: int | None,
                     arrivals: Arrivals) -> float | None:
    """A run with no stop condition stops after DEFAULT_DURATION_S; a trace ends by itself."""
    if duration_s is None and num_requests is None and arrivals.kind != "trace":
        return DEFAULT_DURATION_S
    return duration_s


@dataclass(frozen=True)
class WatchSpec:
    """The live watch: what counts as a stop, how many captures, which engine pids to read."""

    settings: WatchSettings = field(default_factory=WatchSettings)
    max_captures: int = 3
    engine_pids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.settings.validate()
        if self.max_captures < 0:
            raise ValueError(f"watch-captures: must be >= 0, not {self.max_captures}")
        if any(p <= 0 for p in self.engine_pids):
            raise ValueError(f"engine-pid: {min(self.engine_pids)} is not a process id")


@dataclass(frozen=True)
class TelemetrySpec:
    """What is recorded beside the requests: scrapes, the live exposition, the NVML probe,
    the live watch (None: off) and the Prometheus pull after the run (None: none)."""

    scrape_interval_s: float = 1.0
    metrics_bind: tuple[str, int] | None = None
    gpu_probe: bool = False
    gpu_interval_s: float = GPU_INTERVAL_S
    watch: WatchSpec | None = field(default_factory=WatchSpec)
    prometheus: PrometheusClient | None = None  # holds its token; its repr never shows it
    prometheus_selector: str | None = None

    def __post_init__(self) -> None:
        if not self.gpu_interval_s > 0:
            raise ValueError(f"gpu-interval: must be > 0 seconds, not {self.gpu_interval_s}")

    @classmethod
    def from_options(cls, *, scrape_interval: float, gpu_probe: bool, gpu_interval: float,
                     watch: bool, watch_stall: float, watch_captures: int, engine_pid: list[int],
                     prometheus: str | None, prometheus_selector: str | None,
                     prometheus_token_env: str | None, prometheus_token_file: Path | None,
                     prometheus_ca_file: Path | None, prometheus_insecure: bool,
                     prometheus_timeout: float, metrics_port: str | None = None) -> TelemetrySpec:
        """The telemetry options `run` and `sweep` share (`--metrics-port`: `run` only)."""
        # Checked even with --no-watch: a bad value is a typo either way.
        spec = WatchSpec(WatchSettings(stall_s=watch_stall), watch_captures, list(engine_pid))
        bind = None if metrics_port is None else parse_bind(metrics_port)
        if bind is not None and bind[1] != 0:
            try:  # refused now, before anything is sent, rather than mid-run
                bind_socket(*bind).close()
            except OSError as exc:
                raise ValueError(f"metrics-port: cannot listen on {metrics_port}: "
                                 f"{exc.strerror or exc}") from None
        prom = None if prometheus is None else connect(
            prometheus, token_env=prometheus_token_env, token_file=prometheus_token_file,
            ca_file=prometheus_ca_file, insecure=prometheus_insecure, timeout_s=prometheus_timeout)
        return cls(scrape_interval, bind, gpu_probe, gpu_interval, spec if watch else None, prom,
                   prometheus_selector)


def check_store_path(db: Path) -> None:
    if db.exists() and db.is_dir():
        raise ValueError(f"db: {db} is a directory")


@dataclass(frozen=True)
class RunRequest:
    """One measured run: everything `pipeline.record` needs, checked as a whole."""

    db: Path
    target: TargetSpec
    workload: WorkloadSpec
    arrivals: Arrivals
    load: LoadSpec
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
    scale: Scale = field(default_factory=Scale)
    # Added to the stored configuration as is (a sweep point's place in its sweep).
    tags: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.arrivals.validate()
        check_store_path(self.db)
        if self.scale.active and (self.target.replicas or self.telemetry.metrics_bind is not None):
            raise ValueError(f"workers: {WORKERS_REFUSED}")
