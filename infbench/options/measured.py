"""The option groups of a measured run, shared by `infbench run` and `infbench sweep`: the
target, the workload, the load, the telemetry, the scale and the output, each declared once
and each turned into the run pipeline's typed request (`infbench.pipeline.request`), which
checks the values: ValueError, one line naming the option, before anything starts.

`run` and `sweep` differ only where they mean different things: how a run stops (a sweep's
duration is per point), its arrivals (a sweep's points make them) and what is printed. Those
fields are redeclared in a subclass; everything else, target options included, is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from infbench.loadgen.arrivals import KINDS as ARRIVAL_KINDS
from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.run.outcome import validate_max_error_rate
from infbench.loadgen.workers.scale import REFUSED as WORKERS_REFUSED
from infbench.loadgen.workers.scale import Scale
from infbench.loadgen.workloads import WORKLOADS
from infbench.loadgen.workloads.build import DEFAULT_OUTPUT_TOKENS
from infbench.options.groups import OptionGroup, option
from infbench.pipeline.request import (
    DEFAULT_DURATION_S,
    DEFAULT_INPUT_TOKENS,
    DEFAULT_PREFIX_GROUPS,
    DEFAULT_PREFIX_TOKENS,
    DEFAULT_SCHEMA_FIELDS,
    DEFAULT_TURNS,
    GPU_INTERVAL_S,
    LoadSpec,
    RunRequest,
    TargetSpec,
    TelemetrySpec,
    WorkloadSpec,
    arrivals_from_options,
    default_duration,
)
from infbench.pipeline.sweep import SweepRequest
from infbench.slo import parse_slo
from infbench.sweep.loop import SweepPlan


@dataclass(frozen=True)
class TargetOptions(OptionGroup):
    """Where the load goes: one URL, a fleet, or the bundled engine."""

    PANEL = "Target"

    url: list[str] = option([], help="Base URL of an OpenAI-compatible server; default: start the bundled engine. Repeat for a fleet (one workload over several replicas; NAME=URL names one).")
    targets: Path | None = option(None, help="Fleet: a file of replicas, one a line: \\[NAME=]URL \\[dcgm=METRICS_URL] (a dcgm-exporter endpoint scraped beside its /metrics).")
    route: str | None = option(None, help="Fleet routing: round-robin (default) | least-outstanding | share:NAME=W,... (or share:W,W,... in replica order).")
    api_key: str | None = option(None, envvar="OPENAI_API_KEY", show_envvar=True, help="Bearer key (never stored).")
    model: str | None = option(None, help="Model name; default: the first from /v1/models.")
    endpoint: str = option("completions", help="completions | chat")
    metrics_url: str | None = option(None, help="Prometheus endpoint to scrape (default: URL/metrics if present).")
    engine_arg: list[str] = option([], help="Extra argument for the bundled engine (repeatable).")

    def spec(self) -> TargetSpec:
        return TargetSpec.from_options(
            self.url, targets=self.targets, route=self.route, api_key=self.api_key,
            model=self.model, endpoint=self.endpoint, metrics_url=self.metrics_url,
            engine_args=self.engine_arg)


@dataclass(frozen=True)
class WorkloadOptions(OptionGroup):
    """What each request sends; a field added here is an option of `run` and `sweep` both."""

    PANEL = "Workload"

    workload: str = option("synthetic", help=" | ".join(WORKLOADS))
    input_tokens: str = option(DEFAULT_INPUT_TOKENS, help="Input length as the server counts the prompt (BOS, chat template included): 512, uniform:LOW:HIGH, normal:MEAN:STD, lognormal:MEDIAN:SIGMA (multiturn: each user message's own text, the template on top; prefix: the suffix).")
    output_tokens: str | None = option(None, help=f"Output length (max_tokens), same forms (default {DEFAULT_OUTPUT_TOKENS}; sharegpt: each reply's length unless given).")
    prefix_groups: int = option(DEFAULT_PREFIX_GROUPS, help="prefix: number of shared-prefix groups.")
    prefix_tokens: int = option(DEFAULT_PREFIX_TOKENS, help="prefix: tokens in each group's shared prefix.")
    turns: int = option(DEFAULT_TURNS, help="multiturn: turns per conversation.")
    dataset: Path | None = option(None, help="sharegpt: ShareGPT-format JSON file.")
    trace: Path | None = option(None, help="trace: CSV or JSONL of arrivals with lengths (Azure, Mooncake, generic).")
    time_scale: float = option(1.0, help="trace: multiply inter-arrival gaps (0.5 = twice as fast).")
    trace_start: float = option(0.0, help="trace: skip rows before this many seconds into the trace.")
    trace_end: float | None = option(None, help="trace: stop at this many seconds into the trace.")
    schemas: int | None = option(None, help="structured: send K generated JSON schemas (each request picks one) instead of the three fixed ones.")
    schema_fields: str | None = option(None, help=f"structured with --schemas: properties per schema, {DEFAULT_SCHEMA_FIELDS} or uniform:LOW:HIGH for a mix of sizes (default {DEFAULT_SCHEMA_FIELDS}).")
    new_schemas: float | None = option(None, help="structured with --schemas: share of the schemas new to this run, cold on any engine (default 1); the rest are the same text in every run, so an engine that served an earlier run has them compiled.")
    prompt_text: str = option("salted", help="synthetic: the prompts' text, salted (words drawn at random: n-gram speculative drafts find little to copy) or repetitive (one phrase repeated: what they hit).")
    tenants: str | None = option(None, help="Tenants sharing the run, each sent as the body's user: NAME:WEIGHT[:input=LEN][:output=LEN],... e.g. 'docs:1:input=3000,chat:3' (WEIGHT: share of the sessions; input=/output=: that tenant's lengths, forms as --input-tokens). Session k is the same tenant for one --seed on any target.")
    adapters: str | None = option(None, help="The model name each request asks for (LoRA adapters served under their own names): ADAPTER[:WEIGHT],... for every request, or TENANT=ADAPTER[:WEIGHT][+ADAPTER[:WEIGHT]...],... per tenant (tenants not named send the base model); 'base' is --model. E.g. 'sql:3,base:1' or 'docs=sql,chat=chat-lora:3+base:1'.")

    def spec(self) -> WorkloadSpec:
        return WorkloadSpec.parse(
            self.workload, self.input_tokens, self.output_tokens, prefix_groups=self.prefix_groups,
            prefix_tokens=self.prefix_tokens, turns=self.turns, dataset=self.dataset,
            trace=self.trace, time_scale=self.time_scale, trace_start=self.trace_start,
            trace_end=self.trace_end, schemas=self.schemas, schema_fields=self.schema_fields,
            new_schemas=self.new_schemas, prompt_text=self.prompt_text, tenants=self.tenants,
            adapters=self.adapters)


@dataclass(frozen=True)
class ArrivalOptions(OptionGroup):
    """`run`'s arrivals (a sweep's come from its points)."""

    PANEL = "Load"

    arrival: str | None = option(None, help=" | ".join(ARRIVAL_KINDS) + " (default: poisson; trace for --workload trace)")
    rate: float = option(4.0, help="Open loop: requests (sessions) per second.")
    burstiness: float = option(1.0, help="gamma: shape; 1 = Poisson, < 1 burstier.")
    concurrency: int | None = option(None, help="Closed loop: slots (default 8). Open loop: cap on in-flight (default none).")

    def spec(self, workload: WorkloadOptions) -> Arrivals:
        return arrivals_from_options(self.arrival, workload.workload, rate=self.rate,
                                     burstiness=self.burstiness, concurrency=self.concurrency,
                                     time_scale=workload.time_scale)


@dataclass(frozen=True)
class LoadOptions(OptionGroup):
    """When sending stops, what the summary leaves out, how each request is sampled, and the
    objectives goodput counts against; as `run` takes them (a sweep's: SweepLoadOptions)."""

    PANEL = "Load"

    duration: float | None = option(None, help=f"Stop starting requests after this many seconds (default {DEFAULT_DURATION_S:.0f} unless --num-requests); conversations begun run all their turns.")
    num_requests: int | None = option(None, help="Stop after this many requests (multiturn: whole conversations, so up to --turns - 1 more).")
    warmup: float = option(0.0, help="Seconds at the start excluded from the summary (kept in the store).")
    cooldown: float = option(0.0, help="Seconds before sending stopped excluded from the summary.")
    timeout: float = option(300.0, help="Per-request timeout (s).")
    seed: int = option(0, help="Seed for the arrival schedule, lengths and prompt text: the same seed sends the same schedule and lengths to any target.")
    reuse_prompts: bool = option(False, "--reuse-prompts", help="Send the same prompt text as every run with this --seed, to measure prefix-cache reuse. Default: text salted per run (same lengths), so no run is served from an earlier run's cache.")
    temperature: float = option(0.0, help="Sampling temperature sent with each request.")
    ignore_eos: bool = option(True, help="Ask the server to ignore EOS (when it supports it).")
    slo: str | None = option(None, help="Goodput objectives, e.g. ttft=500ms,tpot=50ms,e2el=5s.")

    def spec(self, duration_s: float | None) -> LoadSpec:
        return LoadSpec(duration_s, self.num_requests, self.warmup, self.cooldown, self.timeout,
                        self.seed, self.reuse_prompts, self.temperature, self.ignore_eos,
                        parse_slo(self.slo))


@dataclass(frozen=True)
class SweepLoadOptions(LoadOptions):
    duration: float | None = option(20.0, help="Seconds of load per point.")
    num_requests: int | None = option(None, help="Also stop a point after this many requests.")
    warmup: float = option(0.0, help="Seconds at the start of each point left out of its summary.")


@dataclass(frozen=True)
class TelemetryOptions(OptionGroup):
    """What is recorded beside the requests (`run` adds its live exposition: RunTelemetryOptions)."""

    PANEL = "Telemetry"

    scrape_interval: float = option(1.0, help="Seconds between /metrics and step-log scrapes.")
    prometheus: str | None = option(None, help="After the run, pull the target's series for its window from this Prometheus (vLLM, SGLang, dcgm-exporter, node; histograms as buckets) into the store; a Prometheus that is down or fails only adds a warning to the summary.")
    prometheus_selector: str | None = option(None, help="Label matchers choosing the target's series in --prometheus, e.g. 'pod=~\"vllm-.*\"' (default: the scrape target at the run's URL).")
    prometheus_token_env: str | None = option(None, help="Environment variable holding --prometheus's bearer token (never stored or printed).")
    prometheus_token_file: Path | None = option(None, help="File holding --prometheus's bearer token (never stored or printed).")
    prometheus_ca_file: Path | None = option(None, help="CA bundle to verify an https --prometheus with.")
    prometheus_insecure: bool = option(False, "--prometheus-insecure", help="Do not verify --prometheus's TLS certificate.")
    prometheus_timeout: float = option(10.0, help="Seconds to wait for each --prometheus answer.")
    gpu_probe: bool = option(False, "--gpu-probe", help="Sample this host's GPUs through NVML during the run (clocks, throttle reasons, power, temperature, PCIe, ECC, XID) into gpu_samples; needs nvidia-ml-py (infbench[gpu]). Without it or a GPU: one line, and the run goes on.")
    gpu_interval: float = option(GPU_INTERVAL_S, help="Seconds between --gpu-probe samples.")
    watch: bool = option(True, "--watch/--no-watch", help="Watch the run live and capture evidence while an incident lasts: an engine-wide stop of tokens (--watch-stall), an error burst, a replica departing from its peers at equal load. Each capture (at most --watch-captures, 10 s apart) takes every target's /metrics, the engine's stacks (py-spy; the ranks at /debug/ranks, else --engine-pid) and Flight Recorder dumps where the engine has them, stored with the run for `infbench diagnose RUN`.")
    watch_stall: float = option(1.0, help="Live watch: seconds without a byte on every open stream of a target that count as an engine-wide stop (with no stream open: the least time requests wait for a first byte, beside 4x the longest time to a first chunk among the run's recent finished requests).")
    watch_captures: int = option(3, help="Live watch: most captures taken in one run (0: note the incidents, capture nothing).")
    engine_pid: list[int] = option([], help="Live watch: a process of the engine on this host to read stacks from with py-spy when an incident is seen (repeat: vLLM's API server and its EngineCore). The bundled engine lists its own at /debug/ranks.")

    def spec(self, metrics_port: str | None = None) -> TelemetrySpec:
        return TelemetrySpec.from_options(
            scrape_interval=self.scrape_interval, gpu_probe=self.gpu_probe,
            gpu_interval=self.gpu_interval, watch=self.watch, watch_stall=self.watch_stall,
            watch_captures=self.watch_captures, engine_pid=self.engine_pid,
            prometheus=self.prometheus, prometheus_selector=self.prometheus_selector,
            prometheus_token_env=self.prometheus_token_env,
            prometheus_token_file=self.prometheus_token_file,
            prometheus_ca_file=self.prometheus_ca_file,
            prometheus_insecure=self.prometheus_insecure,
            prometheus_timeout=self.prometheus_timeout, metrics_port=metrics_port)


@dataclass(frozen=True)
class RunTelemetryOptions(TelemetryOptions):
    metrics_port: str | None = option(None, help="Serve the live run in Prometheus text format at PORT (on 127.0.0.1) or HOST:PORT /metrics: requests, errors by class, TTFT/ITL/e2e histograms, client health (dashboards/infbench-run.json), for watching a soak.")

    def spec(self, metrics_port: str | None = None) -> TelemetrySpec:
        return super().spec(self.metrics_port if metrics_port is None else metrics_port)


@dataclass(frozen=True)
class ScaleOptions(OptionGroup):
    """How many processes (or Ray actors) send."""

    PANEL = "Scale"

    workers: int = option(1, help="Worker processes on this host, each with its own event loop and connections: the schedule is split by session (a conversation stays on one), --concurrency and --rate keep their totals, one writer stores everything. With --ray: workers per node.")
    ray: str | None = option(None, help=f"Run the workers as Ray actors on the cluster at this address (HOST:PORT of its head, as `ray start --head` printed), --workers on each alive node; needs infbench[dist] here and on the nodes. Refused (exit 2): {WORKERS_REFUSED}.")
    ray_cpus: float = option(1.0, help="--ray: CPUs each worker actor asks for.")

    def spec(self) -> Scale:
        return Scale(workers=self.workers, ray_address=self.ray, ray_cpus=self.ray_cpus)

    def joined(self) -> Scale:
        """With --ray, the cluster joined and its alive nodes named (ValueError if it cannot be)."""
        if self.ray is None:
            return self.spec()
        from infbench.loadgen.workers.ray_backend import connect as ray_connect
        nodes = ray_connect(self.ray)
        return replace(self.spec(), ray_nodes=tuple(n["NodeID"] for n in nodes))


@dataclass(frozen=True)
class OutputOptions(OptionGroup):
    """Where the results are stored and what is printed."""

    PANEL = "Output"

    db: Path = option(Path("infbench.duckdb"), help="Store file (DuckDB).")


@dataclass(frozen=True)
class RunOutputOptions(OutputOptions):
    json_out: bool = option(False, "--json", help="Print the summary as JSON (vLLM bench key names) on stdout.")
    quiet: bool = option(False, help="No progress (by default a live line on a terminal, a line every 5 s on stderr when piped).")
    max_error_rate: float = option(0.0, help="Exit 0 even when up to this fraction of requests failed (the run is still stored as completed_with_errors).")


@dataclass(frozen=True)
class SweepOutputOptions(OutputOptions):
    json_out: bool = option(False, "--json", help="Print the analysis as JSON on stdout.")
    html: Path | None = option(None, "--html", help="Write the sweep's plots to this HTML file.")


@dataclass(frozen=True)
class SweepPlanOptions(OptionGroup):
    """At which loads a sweep runs."""

    PANEL = "Sweep"

    mode: str = option("auto", help="auto | concurrency | rate")
    points: str | None = option(None, help="Listed loads, e.g. 1,2,4,8 (concurrency) or 2,4,8 (req/s).")
    max_concurrency: int = option(1024, help="auto: the highest concurrency the ramp (1, 2, 4, ...) tries before it gives up on saturation; also caps open-loop points.")
    num_rates: int = option(6, help="auto: open-loop rates between the two ends.")

    def spec(self) -> SweepPlan:
        return SweepPlan.parse(self.mode, self.points, self.max_concurrency, self.num_rates)


def run_request(target: TargetOptions, workload: WorkloadOptions, arrival: ArrivalOptions,
                load: LoadOptions, telemetry: RunTelemetryOptions, scale: ScaleOptions,
                output: RunOutputOptions) -> RunRequest:
    """`infbench run`'s request, every value checked; a Ray cluster is joined last, after
    every local check passed. ValueError (one line naming the option)."""
    validate_max_error_rate(output.max_error_rate)
    wl = workload.spec()
    arrivals = arrival.spec(workload)
    ld = load.spec(default_duration(load.duration, load.num_requests, arrivals))
    tel = telemetry.spec()
    request = RunRequest(output.db, target.spec(), wl, arrivals, ld, tel, scale.spec())
    return replace(request, scale=scale.joined()) if scale.ray is not None else request


def sweep_request(target: TargetOptions, workload: WorkloadOptions, plan: SweepPlanOptions,
                  load: SweepLoadOptions, telemetry: TelemetryOptions,
                  output: SweepOutputOptions) -> SweepRequest:
    """`infbench sweep`'s request, every value checked. ValueError (one line naming the option)."""
    sweep_plan = plan.spec()
    wl = workload.spec()
    ld = load.spec(load.duration)
    tel = telemetry.spec()
    return SweepRequest(output.db, target.spec(), wl, ld, tel, sweep_plan, describe={
        "mode": plan.mode, "points": plan.points, "max_concurrency": plan.max_concurrency,
        "num_rates": plan.num_rates, "duration_s": load.duration,
        "num_requests": load.num_requests, "slo_ms": ld.slo_ms, "engine_args": target.engine_arg})
