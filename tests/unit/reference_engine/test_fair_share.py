"""scheduling_policy fair: tenants served in order of their roofline charge over their weight.

The property tests keep two or three tenants backlogged and check, at every step, the bound
the policy promises (fair_share.py): a tenant's normalised charge runs ahead of another's by
at most the work of the sequences it already had running, so none starves and the charged
shares converge to the weights as the run grows.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infbench.specs.token_cost import decode_seconds, prefill_seconds
from reference_engine.__main__ import build_parser
from reference_engine.block_pool import BlockPool
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.fair_share import FairShare, fair_share_for
from reference_engine.request import SamplingParams, Sequence
from reference_engine.scheduler import Scheduler

BS = 16
EOS = 257


def fair(weights: dict[str, float] | None = None, max_num_seqs: int = 4, budget: int = 512,
         num_blocks: int = 1200, policy: str = "fair", max_loras: int | None = None) -> Scheduler:
    config = EngineConfig(scheduling_policy=policy, tenant_weights=weights)
    return Scheduler(BlockPool(num_blocks, BS, False), max_num_seqs, budget, 8192, True, EOS,
                     policy, fair=fair_share_for(config), max_loras=max_loras)


_ids = itertools.count()


def add(s: Scheduler, tenant: str | None, prompt: int, out: int = 4, t: float = 0.0,
        lora: str | None = None) -> Sequence:
    i = next(_ids)
    seq = Sequence(i, f"r{i}", [100 + (i + k) % 50 for k in range(prompt)],
                   SamplingParams(max_tokens=out, tenant=tenant, lora=lora), lambda o: None, t)
    s.add(seq)
    return seq


def step(s: Scheduler, full: bool = True) -> list[tuple[Sequence, int]]:
    out = s.schedule(0)
    s.update(out, {w.seq_id: 1 for w in out.batch.seqs if w.sample}, 0.0)
    if full:
        s.check_invariants()
    else:  # the pool's own check walks every block: the long runs do it now and then
        assert s.fair is not None
        s.fair.check_invariants()
    return out.scheduled


def test_admits_the_least_charged_tenant_not_the_oldest_request() -> None:
    s = fair(max_num_seqs=1, budget=4096)
    docs = [add(s, "docs", 3000, t=0.0), add(s, "docs", 3000, t=0.1)]
    chat = add(s, "chat", 200, t=0.2)
    assert step(s)[0][0] is docs[0]  # equal charges (none): the oldest head goes first
    while docs[0].status.value != "finished":
        step(s)
    # docs has been charged a 3000-token prefill; chat nothing: chat goes before docs[1].
    assert s.fair is not None and s.fair.normalised("docs") > s.fair.normalised("chat")
    assert step(s)[0][0] is chat


def test_fcfs_serves_the_same_queue_in_arrival_order() -> None:
    s = fair(max_num_seqs=1, budget=4096, policy="fcfs")
    docs = [add(s, "docs", 3000, t=0.0), add(s, "docs", 3000, t=0.1)]
    add(s, "chat", 200, t=0.2)
    while docs[0].status.value != "finished":
        step(s)
    assert step(s)[0][0] is docs[1]


@pytest.mark.parametrize("policy", ["fair", "fcfs"])
def test_prefill_budget_goes_to_the_least_charged_tenant_first(policy: str) -> None:
    s = fair(max_num_seqs=4, budget=256, policy=policy)
    add(s, "docs", 2000, t=0.0)
    step(s)  # docs admitted alone and charged its first chunk
    chat = add(s, "chat", 1000, t=1.0)
    step(s)  # chat arrives at docs' level (no credit for the past): a tie, the older goes
    scheduled = step(s)
    if policy == "fair":
        assert scheduled[0][0] is chat, "chat, now charged less, gets the prefill budget first"
    else:  # fcfs: docs' running prefill takes the whole budget until it is done
        assert [q for q, _ in scheduled] == [s.running[0]] and chat in s.waiting


def test_an_idle_tenant_is_lifted_to_the_virtual_time_and_banks_no_credit() -> None:
    s = fair(max_num_seqs=2, budget=1024)
    for _ in range(6):
        add(s, "docs", 800, out=2)
    for _ in range(40):
        step(s)
    assert s.fair is not None
    docs_charge = s.fair.normalised("docs")
    add(s, "chat", 100, out=2)
    add(s, "docs", 800, out=2)
    step(s)
    # chat arrived after docs had run alone: it starts at docs' level, not at 0.
    assert s.fair.normalised("chat") >= docs_charge * 0.999


def test_weights_scale_the_share() -> None:
    shares = {}
    for w in (1.0, 3.0):
        s = fair({"a": w, "b": 1.0}, max_num_seqs=2, budget=512)
        for k in range(3000):
            for t in ("a", "b"):
                for _ in range(3 - sum(1 for q in s.waiting if q.params.tenant == t)):
                    add(s, t, 300, out=8, t=k)
            step(s, full=k % 100 == 0)
        f = s.fair
        assert f is not None
        shares[w] = f.charges["a"] / (f.charges["a"] + f.charges["b"])
    assert shares[1.0] == pytest.approx(0.5, abs=0.03)
    assert shares[3.0] == pytest.approx(0.75, abs=0.03)


def _max_request_cost(cm, prompt: int, out: int) -> float:
    # The most one request can be charged: its prefill, and every decode at batch 1 (the
    # whole weight read) at its longest context.
    return prefill_seconds(cm, prompt, 0) + out * decode_seconds(cm, prompt + out, 1)


@settings(max_examples=15, deadline=None)
@given(weights=st.lists(st.integers(1, 8), min_size=2, max_size=3),
       prompts=st.lists(st.integers(16, 2500), min_size=3, max_size=3),
       outs=st.lists(st.integers(1, 48), min_size=3, max_size=3),
       seats=st.integers(1, 6), budget=st.sampled_from([128, 512, 2048]))
def test_backlogged_tenants_never_starve_and_shares_converge_to_weights(
        weights: list[int], prompts: list[int], outs: list[int], seats: int, budget: int) -> None:
    names = [f"t{i}" for i in range(len(weights))]
    s = fair(dict(zip(names, map(float, weights), strict=False)), max_num_seqs=seats, budget=budget,
             num_blocks=seats * -(-(max(prompts) + max(outs)) // BS))
    f = s.fair
    assert f is not None
    cmax = max(_max_request_cost(f.cm, p, o) for p, o in zip(prompts, outs, strict=False))
    gap = seats * cmax  # a tenant runs ahead by at most its running sequences' work
    for k in range(800):
        for i, t in enumerate(names):  # more waiting than seats: backlogged all through a step
            for _ in range(seats + 1 - sum(1 for q in s.waiting if q.params.tenant == t)):
                add(s, t, prompts[i], outs[i], t=k)
        step(s, full=k % 100 == 0)
        norms = [f.normalised(t) for t in names]
        assert max(norms) - min(norms) <= gap / min(weights) + 1e-12, "a tenant starved"
    total = sum(f.charges.values())
    wsum = sum(weights)
    for t, w in zip(names, weights, strict=False):
        # |n_t - n_u| <= gap / min w for every pair: the share is off its weight by at most
        # w * that spread over the total charged.
        tol = w * (gap / min(weights)) / total
        assert abs(f.charges[t] / total - w / wsum) <= tol + 1e-9


def test_every_request_finishes_once_arrivals_stop() -> None:
    s = fair({"a": 1.0, "b": 9.0}, max_num_seqs=3, budget=256)
    seqs = [add(s, "a" if i % 4 else "b", 50 + 97 * i % 1500, out=1 + i % 9) for i in range(60)]
    for _ in range(5000):
        if not s.has_work():
            break
        step(s)
    assert all(q.is_finished for q in seqs)


def test_requests_without_a_user_are_one_tenant() -> None:
    s = fair(max_num_seqs=1, budget=4096)
    a = add(s, None, 1000)
    add(s, None, 1000)
    b = add(s, "x", 100)
    while not a.is_finished:
        step(s)
    assert step(s)[0][0] is b
    assert s.fair is not None and set(s.fair.charges) >= {None, "x"}


@pytest.mark.parametrize("max_loras", [1, 2])
def test_fair_admission_keeps_the_adapter_slot_rule(max_loras: int) -> None:
    # Each tenant's head is on an adapter; under fair the least-charged tenant goes first,
    # but a head whose adapter has no slot is skipped (left waiting) and the tenant's next
    # request tried, as vLLM's rule does under fcfs: the batch never holds more adapters.
    s = fair(max_num_seqs=8, budget=4096, max_loras=max_loras)
    names = ["a", "b", "c"][:max_loras + 1]
    heads = [add(s, f"t{i}", 100, out=6, lora=n) for i, n in enumerate(names)]
    base = add(s, f"t{max_loras}", 100, out=6)  # behind the head with no slot, same tenant
    first = {q.seq_id for q, _ in step(s)}
    assert {h.seq_id for h in heads[:max_loras]} | {base.seq_id} == first
    assert heads[-1].status.value == "waiting"  # skipped, not admitted and not dropped
    seen: set[str] = set()
    for _ in range(200):
        if not s.has_work():
            break
        step(s)
        adapters = {q.params.lora for q in s.running} - {None}
        assert len(adapters) <= max_loras
        seen |= adapters
    assert not s.has_work() and seen | set(names[:max_loras]) == set(names)


def test_check_invariants_catches_a_bad_total() -> None:
    f = FairShare(fair().fair.cm)  # type: ignore[union-attr]  # built by fair() with policy fair
    f.charge("a", 1.0)
    f.total_charged = 2.0
    with pytest.raises(Exception, match="add up"):
        f.check_invariants()


@pytest.mark.parametrize("given, message", [
    ({"tenant_weights": {"a": 1.0}}, "apply to scheduling_policy fair"),
    ({"scheduling_policy": "fair", "tenant_weights": {"a": 0}}, "weight 0"),
    ({"scheduling_policy": "fair", "tenant_weights": {"": 1.0}}, "non-empty"),
    ({"scheduling_policy": "fair", "tenant_weights": {"a": float("inf")}}, "weight inf"),
])
def test_config_refuses_bad_weights(given: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**given)


def test_cli_parses_tenant_weights() -> None:
    args = build_parser().parse_args(["--scheduling-policy", "fair", "--tenant-weights",
                                      "docs=1, chat=2.5"])
    assert args.tenant_weights == {"docs": 1.0, "chat": 2.5}
    for bad in ("docs", "docs=0", "docs=x", "=2"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--tenant-weights", bad])


def test_fair_needs_a_model_the_roofline_knows() -> None:
    with pytest.raises(ConfigError, match="roofline"):
        fair_share_for(EngineConfig(scheduling_policy="fair", model="no-such/model-xyz"))
