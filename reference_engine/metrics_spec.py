"""Speculative decoding's counters on /metrics, under vLLM's names (spec_decode.py counts).

`vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_total`,
`..._num_accepted_tokens_total` and `..._num_accepted_tokens_per_pos_total{position="i"}`
(i from 0, one series per draft position), all with the `model_name` label. Nothing is
written when speculation is off, as vLLM writes none.
"""

from __future__ import annotations

from reference_engine.metrics import escape_label_value
from reference_engine.spec_decode import SpecCounters

_FAMILIES = (
    ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", "num_drafts"),
    ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", "num_draft_tokens"),
    ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", "num_accepted_tokens"),
)


def render(counters: SpecCounters | None, model_name: str) -> str:
    if counters is None:
        return ""
    label = f'model_name="{escape_label_value(model_name)}"'
    lines: list[str] = []
    for family, doc, attribute in _FAMILIES:
        name = family + "_total"
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter",
                  f"{name}{{{label}}} {getattr(counters, attribute)}"]
    name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    lines += [f"# HELP {name} Accepted tokens per draft position.", f"# TYPE {name} counter"]
    lines += [f'{name}{{{label},position="{i}"}} {n}'
              for i, n in enumerate(counters.accepted_per_pos)]
    return "\n".join(lines) + "\n"
