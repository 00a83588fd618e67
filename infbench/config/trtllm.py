"""TensorRT-LLM `trtllm-serve` option files (`--config` / `--extra_llm_api_options` YAML).

The file holds only what its author set, so every setting's origin is `set`; the engine's
defaults for the rest come from the catalog.
"""

from __future__ import annotations

from infbench.config import miniyaml
from infbench.config.model import Captured, CaptureError, Setting, flatten
from infbench.config.normalize import normalise

# Top-level keys of the LLM API's options; a YAML with none of them is some other file.
KNOWN = {"cuda_graph_config", "kv_cache_config", "enable_attention_dp", "max_batch_size",
         "max_num_tokens", "max_seq_len", "tp_size", "pp_size", "ep_size", "stream_interval",
         "moe_config", "backend", "enable_chunked_prefill", "scheduler_config",
         "speculative_config", "print_iter_log", "disable_overlap_scheduler",
         "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio", "attn_backend"}


def looks_like_trtllm(text: str) -> bool:
    try:
        doc = miniyaml.loads(text)
    except miniyaml.YamlError:
        # An option file with an error is still one: the parser reports the line.
        return any(line.split(":", 1)[0].strip() in KNOWN for line in text.splitlines())
    return bool(set(doc) & KNOWN)


def parse_trtllm_yaml(text: str, source: str) -> Captured:
    try:
        doc = miniyaml.loads(text)
    except miniyaml.YamlError as exc:
        raise CaptureError(f"{exc}; nothing was stored") from None
    cap = Captured("trtllm", None, "trtllm_yaml", source)
    flat: dict = {}
    flatten("", doc, flat)
    lines = text.splitlines()
    for raw_key, value in flat.items():
        key, v = normalise("trtllm", raw_key, value)
        # TensorRT-LLM's PyTorch backend overlaps scheduling with the device step unless told
        # not to: the same thing vLLM calls async scheduling.
        if raw_key == "disable_overlap_scheduler" and isinstance(value, bool):
            key, v = "async_scheduling", not value
        leaf = raw_key.rsplit(".", 1)[-1]
        line = next((n for n, text_line in enumerate(lines, start=1)
                     if text_line.strip().startswith(f"{leaf}:")), None)
        cap.put(Setting(key, v, "set", raw_key, line))
    if not cap.settings:
        raise CaptureError(f"{source}: the option file sets nothing; nothing was stored")
    return cap
