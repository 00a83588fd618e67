"""The command-line options of a measured run that `infbench run` and `infbench sweep` both
take, declared once so the two cannot drift in name, default or help.

Not a command itself: commands may not import each other. What the values mean, and the checks
on them, are `infbench.pipeline.request`'s; options only one command has stay with it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from infbench.loadgen.workloads import WORKLOADS
from infbench.loadgen.workloads.build import DEFAULT_OUTPUT_TOKENS
from infbench.pipeline.request import (
    DEFAULT_INPUT_TOKENS,
    DEFAULT_PREFIX_GROUPS,
    DEFAULT_PREFIX_TOKENS,
    DEFAULT_TURNS,
    GPU_INTERVAL_S,
)

# Target
API_KEY = typer.Option(None, envvar="OPENAI_API_KEY", show_envvar=True, help="Bearer key (never stored).")
MODEL = typer.Option(None, help="Model name; default: the first from /v1/models.")
ENDPOINT = typer.Option("completions", help="completions | chat")
DB = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB).")
ENGINE_ARG = typer.Option([], help="Extra argument for the bundled engine (repeatable).")
METRICS_URL = typer.Option(None, help="Prometheus endpoint to scrape (default: URL/metrics if present).")

# Workload
WORKLOAD = typer.Option("synthetic", help=" | ".join(WORKLOADS))
INPUT_TOKENS = typer.Option(DEFAULT_INPUT_TOKENS, help="Input length as the server counts the prompt (BOS, chat template included): 512, uniform:LOW:HIGH, normal:MEAN:STD, lognormal:MEDIAN:SIGMA (multiturn: each user message's own text, the template on top; prefix: the suffix).")
OUTPUT_TOKENS = typer.Option(None, help=f"Output length (max_tokens), same forms (default {DEFAULT_OUTPUT_TOKENS}; sharegpt: each reply's length unless given).")
PREFIX_GROUPS = typer.Option(DEFAULT_PREFIX_GROUPS, help="prefix: number of shared-prefix groups.")
PREFIX_TOKENS = typer.Option(DEFAULT_PREFIX_TOKENS, help="prefix: tokens in each group's shared prefix.")
TURNS = typer.Option(DEFAULT_TURNS, help="multiturn: turns per conversation.")
DATASET = typer.Option(None, help="sharegpt: ShareGPT-format JSON file.")
TRACE = typer.Option(None, help="trace: CSV or JSONL of arrivals with lengths (Azure, Mooncake, generic).")
TIME_SCALE = typer.Option(1.0, help="trace: multiply inter-arrival gaps (0.5 = twice as fast).")
TRACE_START = typer.Option(0.0, help="trace: skip rows before this many seconds into the trace.")
TRACE_END = typer.Option(None, help="trace: stop at this many seconds into the trace.")

# Each request, and what the summary counts
COOLDOWN = typer.Option(0.0, help="Seconds before sending stopped excluded from the summary.")
TIMEOUT = typer.Option(300.0, help="Per-request timeout (s).")
SEED = typer.Option(0, help="Seed for the arrival schedule, lengths and prompt text: the same seed sends the same schedule and lengths to any target.")
REUSE_PROMPTS = typer.Option(False, "--reuse-prompts", help="Send the same prompt text as every run with this --seed, to measure prefix-cache reuse. Default: text salted per run (same lengths), so no run is served from an earlier run's cache.")
TEMPERATURE = typer.Option(0.0, help="Sampling temperature sent with each request.")
IGNORE_EOS = typer.Option(True, help="Ask the server to ignore EOS (when it supports it).")
SLO = typer.Option(None, help="Goodput objectives, e.g. ttft=500ms,tpot=50ms,e2el=5s.")

# Telemetry
SCRAPE_INTERVAL = typer.Option(1.0, help="Seconds between /metrics and step-log scrapes.")
PROMETHEUS = typer.Option(None, help="After the run, pull the target's series for its window from this Prometheus (vLLM, SGLang, dcgm-exporter, node; histograms as buckets) into the store; a Prometheus that is down or fails only adds a warning to the summary.")
PROMETHEUS_SELECTOR = typer.Option(None, help="Label matchers choosing the target's series in --prometheus, e.g. 'pod=~\"vllm-.*\"' (default: the scrape target at the run's URL).")
PROMETHEUS_TOKEN_ENV = typer.Option(None, help="Environment variable holding --prometheus's bearer token (never stored or printed).")
PROMETHEUS_TOKEN_FILE = typer.Option(None, help="File holding --prometheus's bearer token (never stored or printed).")
PROMETHEUS_CA_FILE = typer.Option(None, help="CA bundle to verify an https --prometheus with.")
PROMETHEUS_INSECURE = typer.Option(False, "--prometheus-insecure", help="Do not verify --prometheus's TLS certificate.")
PROMETHEUS_TIMEOUT = typer.Option(10.0, help="Seconds to wait for each --prometheus answer.")
GPU_PROBE = typer.Option(False, "--gpu-probe", help="Sample this host's GPUs through NVML during the run (clocks, throttle reasons, power, temperature, PCIe, ECC, XID) into gpu_samples; needs nvidia-ml-py (infbench[gpu]). Without it or a GPU: one line, and the run goes on.")
GPU_INTERVAL = typer.Option(GPU_INTERVAL_S, help="Seconds between --gpu-probe samples.")
WATCH = typer.Option(True, "--watch/--no-watch", help="Watch the run live and capture evidence while an incident lasts: an engine-wide stop of tokens (--watch-stall), an error burst, a replica departing from its peers at equal load. Each capture (at most --watch-captures, 10 s apart) takes every target's /metrics, the engine's stacks (py-spy; the ranks at /debug/ranks, else --engine-pid) and Flight Recorder dumps where the engine has them, stored with the run for `infbench diagnose RUN`.")
WATCH_STALL = typer.Option(1.0, help="Live watch: seconds without a byte on every open stream of a target that count as an engine-wide stop.")
WATCH_CAPTURES = typer.Option(3, help="Live watch: most captures taken in one run (0: note the incidents, capture nothing).")
ENGINE_PID = typer.Option([], help="Live watch: a process of the engine on this host to read stacks from with py-spy when an incident is seen (repeat: vLLM's API server and its EngineCore). The bundled engine lists its own at /debug/ranks.")
