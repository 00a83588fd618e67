"""--tenants and --adapters: parsing (every bad spec one ValueError naming the option and the
part), the per-session draw (same seed, same tenant and adapter on any target; one tenant's
lengths never move another's), the body fields and the recorded columns."""

from __future__ import annotations

import json
from collections import Counter
from itertools import islice
from typing import Any

import pytest

from infbench.loadgen.http.bodies import build_body
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads import MultiTurn, Synthetic, TokenModel, Workload
from infbench.loadgen.workloads.base import RequestSpec
from infbench.loadgen.workloads.build import check_tenants
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.tenant_spec import parse_adapters, parse_tenants
from infbench.loadgen.workloads.tenants import TenantMix
from infbench.store.writer import ColumnBuffer

BPE = TokenModel(1.0, 1.0, "measured")
BYTES = TokenModel(4.7, 42.0, "measured")


def L(text: str) -> LengthDist:
    return LengthDist.parse(text, "test")


def test_tenants_parse_names_weights_and_length_overrides() -> None:
    t = parse_tenants("docs:1:input=uniform:2000:4000:output=64, chat:3")
    assert [x.name for x in t] == ["docs", "chat"] and [x.weight for x in t] == [1.0, 3.0]
    assert t[0].input_len == L("uniform:2000:4000") and t[0].output_len == L("64")
    assert t[1].input_len is None and t[1].output_len is None
    assert parse_tenants("a:0.5:output=lognormal:100:0.5")[0].output_len == L("lognormal:100:0.5")


@pytest.mark.parametrize(("spec", "names"), [
    ("docs", "'docs' is not NAME:WEIGHT"),
    ("docs:", "weight ''"),
    ("docs:0", "weight '0'"),
    ("docs:-1", "weight '-1'"),
    ("docs:nan", "weight 'nan'"),
    ("docs:inf", "weight 'inf'"),
    ("docs:1:size=3", "'docs:1:size=3' is not"),
    ("docs:1:input=uniform:9:1", "'uniform:9:1'"),
    ("docs:1:input=3:input=4", "input= is given twice"),
    ("docs:1,,chat:1", "'' is not"),
    ("a b:1", "tenant name 'a b'"),
    ("x=y:1", "tenant name 'x=y'"),
    ("docs:1,docs:2", "'docs' is named twice"),
    ("[bold]x:1", "'[bold]x'"),
])
def test_bad_tenants_are_one_line_naming_the_part(spec: str, names: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_tenants(spec)
    msg = str(exc.value)
    assert msg.startswith("tenants") and names in msg and "\n" not in msg, msg


def test_adapters_parse_both_forms() -> None:
    shared = parse_adapters("sql:3,chat,base:1")
    assert shared.mix_for(None) == (("sql", 3.0), ("chat", 1.0), (None, 1.0))
    assert shared.mix_for("anyone") == shared.mix_for(None) and shared.adapters == ["sql", "chat"]
    tenants = parse_tenants("docs:1,chat:3,ops:1")
    per = parse_adapters("docs=sql,chat=chat-lora:3+base:1", tenants)
    assert per.mix_for("docs") == (("sql", 1.0),)
    assert per.mix_for("chat") == (("chat-lora", 3.0), (None, 1.0))
    assert per.mix_for("ops") == ((None, 1.0),)  # not named: the base model
    assert per.adapters == ["sql", "chat-lora"]
    assert per.describe() == {"docs": [["sql", 1.0]], "chat": [["chat-lora", 3.0], ["base", 1.0]]}


@pytest.mark.parametrize(("spec", "tenants", "names"), [
    ("sql,,chat", "", "empty entry"),
    ("sql:0", "", "weight '0'"),
    ("sql,sql", "", "'sql' is named twice"),
    ("a=sql", "", "no --tenants"),
    ("a=sql,chat", "a:1", "mixes the two forms"),
    ("b=sql", "a:1", "tenant 'b'"),
    ("a=sql,a=chat", "a:1", "tenant 'a' is given twice"),
    ("a=", "a:1", "names no adapter"),
    ("a=sql+", "a:1", "adapter ''"),
    ("s ql", "", "adapter 's ql'"),
])
def test_bad_adapters_are_one_line_naming_the_part(spec: str, tenants: str, names: str) -> None:
    who = parse_tenants(tenants) if tenants else ()
    with pytest.raises(ValueError) as exc:
        parse_adapters(spec, who)
    msg = str(exc.value)
    assert msg.startswith("adapters") and names in msg and "\n" not in msg, msg


def test_tenants_refused_where_the_workload_cannot_take_them() -> None:
    with pytest.raises(ValueError, match="--workload trace"):
        check_tenants("trace", parse_tenants("a:1"))
    with pytest.raises(ValueError, match="input= does not apply"):
        check_tenants("sharegpt", parse_tenants("a:1:input=100"))
    check_tenants("sharegpt", parse_tenants("a:1:output=100"))  # output= does apply


def _mix(tokens: TokenModel, tenants: str, adapters: str | None, inp: str = "uniform:40:400",
         out: str = "uniform:8:64") -> TenantMix:
    who = parse_tenants(tenants) if tenants else ()
    base = Synthetic(L(inp), L(out), tokens)
    parts: list[Workload] = [Synthetic(t.input_len or L(inp), t.output_len or L(out), tokens)
                             for t in who]
    return TenantMix(base, who, parts, parse_adapters(adapters, who) if adapters else None)


def _first(wl: Workload, seed: int, n: int) -> list[RequestSpec]:
    return [next(s) for s in islice(wl.sessions(Streams(seed, salt=seed + 1)), n)]


EIGHT = ",".join(f"t{i}:1" for i in range(8))
EIGHT_ADAPTERS = ",".join(f"t{i}=lora-{i}" for i in range(8))


@pytest.mark.parametrize(("tenants", "adapters", "seed"), [
    ("docs:1:input=3000,chat:3", "docs=sql,chat=chat-lora:3+base:1", 0),
    (EIGHT, EIGHT_ADAPTERS, 7),
    ("", "a:1,b:2,base:1", 3),
])
def test_same_seed_same_tenant_adapter_and_lengths_on_any_target(
        tenants: str, adapters: str, seed: int) -> None:
    def identity(tokens: TokenModel) -> list[tuple[Any, ...]]:
        return [(s.tenant, s.model, s.target_input_tokens, s.max_tokens)
                for s in _first(_mix(tokens, tenants, adapters), seed, 300)]

    a, b = identity(BPE), identity(BYTES)
    assert a == b
    assert identity(BPE) == a  # and again
    other = [(s.tenant, s.model) for s in _first(_mix(BPE, tenants, adapters), seed + 1, 300)]
    assert other != [x[:2] for x in a]  # the seed decides it


def test_shares_follow_the_weights() -> None:
    specs = _first(_mix(BPE, "docs:1,chat:3", "docs=sql,chat=chat-lora:3+base:1"), 1, 4000)
    tenants = Counter(s.tenant for s in specs)
    assert abs(tenants["chat"] / 4000 - 0.75) < 0.03
    chat = Counter(s.model for s in specs if s.tenant == "chat")
    assert abs(chat["chat-lora"] / tenants["chat"] - 0.75) < 0.03
    assert {s.model for s in specs if s.tenant == "docs"} == {"sql"}
    assert None in chat  # base: the run's own --model


def test_one_tenants_lengths_do_not_move_the_others() -> None:
    plain = _first(_mix(BPE, "docs:1,chat:3", None), 5, 400)
    longer = _first(_mix(BPE, "docs:1:input=3000:output=500,chat:3", None), 5, 400)
    assert [s.tenant for s in plain] == [s.tenant for s in longer]
    chat = [(s.target_input_tokens, s.max_tokens) for s in plain if s.tenant == "chat"]
    assert chat == [(s.target_input_tokens, s.max_tokens) for s in longer if s.tenant == "chat"]
    assert {(s.target_input_tokens, s.max_tokens) for s in longer if s.tenant == "docs"} == {(3000, 500)}


def test_adapters_alone_leave_the_runs_own_requests_as_they_were() -> None:
    plain = _first(Synthetic(L("uniform:40:400"), L("uniform:8:64"), BPE), 2, 200)
    mixed = _first(_mix(BPE, "", "a,b"), 2, 200)
    assert [(s.prompt, s.max_tokens) for s in plain] == [(s.prompt, s.max_tokens) for s in mixed]
    assert {s.model for s in mixed} == {"a", "b"} and {s.tenant for s in mixed} == {None}


def test_conversations_are_renumbered_by_session_and_keep_their_tenant() -> None:
    who = parse_tenants("a:1,b:1")
    parts: list[Workload] = [MultiTurn(2, L("20"), L("8"), BPE) for _ in who]
    mix = TenantMix(MultiTurn(2, L("20"), L("8"), BPE), who, parts, parse_adapters("a=x,b=y", who))
    assert mix.turns == 2 and mix.needs_text
    seen = []
    for sess in islice(mix.sessions(Streams(0, 1)), 20):
        first = next(sess)
        second = sess.send("a reply")
        assert (second.tenant, second.model, second.conversation_id) == (
            first.tenant, first.model, first.conversation_id)
        seen.append(first.conversation_id)
    assert seen == list(range(20))  # both tenants' conversation 0 would otherwise collide


def test_body_carries_user_and_the_adapters_model_name() -> None:
    spec = RequestSpec(label="x", max_tokens=4, prompt="hi", tenant="docs", model="sql")
    body = json.loads(build_body(spec, endpoint="completions", model="base-model",
                                 ignore_eos=True, temperature=0.0))
    assert body["user"] == "docs" and body["model"] == "sql"
    plain = json.loads(build_body(RequestSpec(label="x", max_tokens=4, prompt="hi"),
                                  endpoint="chat", model="base-model", ignore_eos=True,
                                  temperature=0.0))
    assert plain["model"] == "base-model" and "user" not in plain


def test_request_rows_carry_tenant_and_adapter() -> None:
    from infbench.loadgen.http.client import RawResponse
    from infbench.loadgen.run.stream_rows import parse_now, request_row

    raw = RawResponse(status=200, send_ns=10, end_ns=20)
    spec = RequestSpec(label="x", max_tokens=4, prompt="hi", tenant="docs", model="sql")
    row = request_row(0, spec, 5, raw, parse_now(raw, False), t0=0, warmup_s=0.0,
                      error_class=None, error_message=None)
    buf = ColumnBuffer("requests")
    buf.append(row)
    buf.append(request_row(1, RequestSpec(label="x", max_tokens=4, prompt="hi"), 5, raw,
                           parse_now(raw, False), t0=0, warmup_s=0.0, error_class=None,
                           error_message=None))
    cols = buf.take()
    assert cols["tenant"] == ["docs", None] and cols["adapter"] == ["sql", None]
