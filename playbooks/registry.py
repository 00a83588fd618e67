"""Every playbook, registered once: the CLI's verbs (`infbench diagnose VERB`), the triage's
choice of what a run's data allow, and `show`'s naming of what a diagnosis is about all read
this list, in this order (the order `infbench diagnose --help` lists them).

A new playbook is its package (options type with `validate()`, `diagnose_x(con, ref,
options) -> Diagnosis`, runbook) plus one `Playbook(...)` entry below. With it:
- `infbench diagnose VERB RUN` exists, with --db/--json/--sql/--save and one option per
  field of the options type that carries `field(metadata={"help": ...})` (`flag` names the
  option when it is not the field's name); a verb that needs more (a capture, an import, a
  sweep) is written in `infbench/commands/diagnose/` and named in its `CUSTOM_VERBS`;
- `infbench diagnose RUN` (the triage) runs it whenever the run has the rows it `needs`,
  and lists why it did or did not; its findings are ranked with the others';
- the report shows its stored findings (the report reads the `findings` table by playbook
  name and imports no playbook).
Counted on `links`, the last playbook added before this registry: besides its package it
took a verb function in `commands/diagnose/verbs.py`, an entry in the verb tuple of
`commands/diagnose/__init__.py`, a runner in `playbooks/triage/playbook.py` and a rule in
`playbooks/triage/inventory.py` (four places in three packages); now it is its package and
its entry below (its verb is built, the triage reads its `needs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal, get_type_hints

import duckdb

from playbooks.adapters import AdapterOptions, diagnose_adapters
from playbooks.config import ConfigOptions, diagnose_config
from playbooks.dilution import DilutionOptions, diagnose_dilution
from playbooks.findings import Diagnosis
from playbooks.hang import HangOptions, diagnose_hang
from playbooks.links import LinksOptions, diagnose_links
from playbooks.mbu import MbuOptions, diagnose_mbu
from playbooks.memory import MemoryOptions, diagnose_memory
from playbooks.replicas import ReplicaOptions, diagnose_replicas
from playbooks.specdec import SpecdecOptions, diagnose_specdec
from playbooks.stalls import StallOptions, diagnose_stalls
from playbooks.startup import StartupOptions, diagnose_startup
from playbooks.structured import StructuredOptions, diagnose_structured
from playbooks.tenants import TenantOptions, diagnose_tenants

# What the triage's inventory counts for a run (`playbooks/triage/inventory.py`); a playbook
# needs some of these (one that reads a kind of row not counted yet adds it to both).
ROW_KINDS = ("requests", "content_chunks", "engine_steps", "metric_samples", "memory_samples",
             "gpu_samples", "client_samples", "hang_captures", "startup_logs", "traces",
             "configs", "link_probes", "structured_requests", "spec_decode_samples",
             "tenant_requests", "adapter_requests")


@dataclass(frozen=True)
class Needs:
    """What a run must have for the triage to run the playbook, and what it says either way.

    The kind of run is checked first (`engines`: "one" skips fleet runs with `fleet_why_not`,
    "fleet" runs only on fleet runs), then the rows (at least one kind of `rows` counted above
    zero; none listed: no rows needed) and the GPU model. `why` may name {gpu}, {model} and
    {replicas}."""

    why: str
    why_not: str
    rows: tuple[str, ...] = ()
    gpu_model: bool = False
    engines: Literal["any", "one", "fleet"] = "any"
    fleet_why_not: str = ""
    # A playbook over two runs (a benchmark and production) is run by its verb only: the
    # triage has one run, and `why_not` says how to run it.
    pair: bool = False

    def __post_init__(self) -> None:
        unknown = [r for r in self.rows if r not in ROW_KINDS]
        if unknown:
            raise ValueError(f"needs rows the inventory does not count: {', '.join(unknown)}")
        if self.engines == "one" and not self.fleet_why_not:
            raise ValueError("a playbook of one engine says why it skips a fleet run")

    def check(self, counts: dict[str, int], gpu: str | None, model: str | None) -> tuple[bool, str]:
        """(runs, why) for a run with these inventory counts and engine setup."""
        fleet = counts.get("replicas", 0) > 1
        if self.pair:
            return False, self.why_not
        if self.engines == "one" and fleet:
            return False, self.fleet_why_not
        if self.engines == "fleet" and not fleet:
            return False, self.why_not
        if self.rows and not any(counts.get(r, 0) > 0 for r in self.rows):
            return False, self.why_not
        if self.gpu_model and gpu is None:
            return False, self.why_not
        return True, self.why.format(gpu=gpu, model=model, replicas=counts.get("replicas", 0))


@dataclass(frozen=True)
class Linked:
    """A playbook that reads one linked record rather than the run itself (a hang capture, a
    start-up log): where the triage finds the run's latest, and what `show` calls it."""

    table: str
    key: str
    order: str
    noun: str


@dataclass(frozen=True)
class Playbook:
    name: str                       # Diagnosis.playbook, as stored in `findings`
    options: type                   # a dataclass with validate(); defaults are the triage's
    diagnose: Callable[[duckdb.DuckDBPyConnection, str, Any], Diagnosis]
    needs: Needs
    help: str = ""                  # the verb's --help, where the CLI builds the verb (its
    #                                 line breaks are kept); a written verb has its docstring
    verb: str = ""                  # `infbench diagnose VERB`; the name when empty
    reads: Linked | None = None     # None: the run itself
    argument_help: str = "Run id, unique prefix, or 'last'."

    @property
    def command(self) -> str:
        return self.verb or self.name

    def triage_options(self, shared: dict[str, Any]) -> Any:
        """The options the triage runs it with: its defaults, and any of the triage's own
        settings (min_stall_ms, itl_target_ms, db) that the options type has a field for."""
        names = {f.name for f in fields(self.options)}
        return self.options(**{k: v for k, v in shared.items() if k in names and v is not None})


PLAYBOOKS: tuple[Playbook, ...] = (
    Playbook("stalls", StallOptions, diagnose_stalls,
             Needs("the client timeline of every request", "no requests recorded",
                   rows=("requests",))),
    Playbook("mbu", MbuOptions, diagnose_mbu,
             Needs("the GPU ({gpu}) and model ({model}) are known",
                   "no GPU model known for this run (give --gpu when running)",
                   rows=("requests",), gpu_model=True)),
    Playbook("replicas", ReplicaOptions, diagnose_replicas,
             Needs("a fleet of {replicas} replicas", "one target", engines="fleet")),
    Playbook("startup", StartupOptions, diagnose_startup,
             Needs("a start-up log is linked", "no start-up log linked", rows=("startup_logs",)),
             reads=Linked("startup_logs", "log_id", "imported_at", "start-up log")),
    Playbook("memory", MemoryOptions, diagnose_memory,
             Needs("memory series or a step log", "neither memory series nor a step log",
                   rows=("memory_samples", "engine_steps"), engines="one",
                   fleet_why_not="a fleet run (the memory playbook reads one engine)")),
    Playbook("hang", HangOptions, diagnose_hang,
             Needs("a hang capture is linked", "no hang capture linked", rows=("hang_captures",)),
             reads=Linked("hang_captures", "capture_id", "created_at", "capture")),
    Playbook("config", ConfigOptions, diagnose_config,
             Needs("the engine's configuration is linked", "no configuration linked",
                   rows=("configs",), engines="one",
                   fleet_why_not="a fleet run (the config playbook reads one engine's)"),
             help="The engine's configuration linked to the run against what the run asked of it: the\n"
                  "batch cap the load ran into, requests over max_model_len, prefix caching off under shared\n"
                  "prefixes, a prefill budget below the prompts (runbook: playbooks/config/config.md)."),
    Playbook("links", LinksOptions, diagnose_links,
             Needs("a link probe is linked", "no link probe linked", rows=("link_probes",)),
             help="What the link probes linked to the run (`infbench probe links --run RUN`) found: a slow\n"
                  "rank or pair on the run's hosts, as a finding over the whole run."),
    Playbook("structured", StructuredOptions, diagnose_structured,
             Needs("structured-output requests, labelled by schema",
                   "no structured-output requests (--workload structured)",
                   rows=("structured_requests",)),
             help="Structured output's two costs: the compile stall each new schema's first request\n"
                  "waits (against the requests that found their schema compiled) and the token mask\n"
                  "every step pays, blocking the step or overlapping the forward pass (from the step\n"
                  "log where the engine keeps one); the fix (runbook: playbooks/structured/structured.md)."),
    Playbook("specdec", SpecdecOptions, diagnose_specdec,
             Needs("speculative decoding counters (vllm:spec_decode_*) in the run's scrapes",
                   "no speculative decoding counters (the engine did not speculate)",
                   rows=("spec_decode_samples",)),
             help="Speculative decoding from the engine's counters: acceptance rate, mean accepted\n"
                  "length and acceptance per draft position (an interval holding an engine restart\n"
                  "left out and said), tokens per step the clients saw; with --baseline, the speed-up\n"
                  "per batch size and the batch from which it costs throughput (runbook:\n"
                  "playbooks/specdec/specdec.md)."),
    Playbook("dilution", DilutionOptions, diagnose_dilution,
             Needs("a benchmark run and a production run", "compares a benchmark run with a "
                   "production run: `infbench diagnose dilution BENCH_RUN PROD_RUN`", pair=True),
             argument_help="The benchmark run: id, unique prefix or 'last'."),
    Playbook("tenants", TenantOptions, diagnose_tenants,
             Needs("requests from several tenants (the body's user) on a known GPU ({gpu})",
                   "no tenants in the run (infbench run --tenants), or no GPU model known",
                   rows=("tenant_requests",), gpu_model=True),
             help="Each tenant's share of the engine (prefill and decode tokens priced on the\n"
                  "roofline) against its share of requests, and while tenants competed against its\n"
                  "entitlement: the tenant that takes more while the others wait (the long-document\n"
                  "tenant), and the fix (runbook: playbooks/tenants/tenants.md)."),
    Playbook("adapters", AdapterOptions, diagnose_adapters,
             Needs("requests naming LoRA adapters (infbench run --adapters)",
                   "no request named an adapter (infbench run --adapters)",
                   rows=("adapter_requests",)),
             help="LoRA adapters taking turns: latency by adapter against the batches' composition\n"
                  "(distinct adapters per step at the max_loras ceiling while others wait, from the\n"
                  "engine step log or vLLM's vllm:lora_requests_info; TTFT against the adapters in\n"
                  "flight), and the setting that fixes it (runbook: playbooks/adapters/adapters.md)."),
)

BY_NAME: dict[str, Playbook] = {p.name: p for p in PLAYBOOKS}


@dataclass(frozen=True)
class CliField:
    name: str        # the options type's field
    flag: str        # --the-flag
    type: Any
    default: Any
    help: str


def cli_fields(options: type) -> list[CliField]:
    """The options the CLI offers for an options type: each field with `metadata={"help":
    ...}` (and optionally "flag"), in declaration order."""
    hints = get_type_hints(options)
    out = []
    for f in fields(options):
        if "help" not in f.metadata:
            continue
        default = f.default if f.default_factory is MISSING else f.default_factory()
        if default is MISSING:
            raise ValueError(f"{options.__name__}.{f.name}: a CLI option needs a default")
        flag = str(f.metadata.get("flag") or "--" + f.name.replace("_", "-"))
        out.append(CliField(f.name, flag, hints[f.name], default, str(f.metadata["help"])))
    return out
