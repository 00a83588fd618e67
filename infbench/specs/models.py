"""Model specs parsed from a Hugging Face `config.json` (bundled or a local path).

One parser serves both the bundled catalog and a user's file, so every catalog entry is a
test of the parser. Fields follow the Hugging Face names of each family (Llama, Qwen2,
Mixtral, DeepSeek-V2/V3, Gemma-2, Mistral); where a family leaves a field out, the default
is the one that family's `transformers` config class uses.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from infbench.specs.errors import SpecError
from infbench.specs.model_catalog import ALIAS_NOTES, CATALOG, INSTRUCT_NOTE
from infbench.specs.names import ALIAS, CONFIG_FILE, EXACT, SHORT_NAME, STAND_IN, Resolved
from infbench.specs.params import ParamCount, count_params

# Families whose config class ties the output head to the embedding unless told otherwise.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text"}
# Families with a bias on the q/k/v projections (but not on o_proj) that the config omits.
_QKV_BIAS_BY_DEFAULT = {"qwen2", "qwen2_moe"}
# Gemma-2/3 put a norm before and after both attention and MLP.
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}


@dataclass(frozen=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3): the cache holds one latent per token."""

    q_lora_rank: int | None  # None: q is projected directly from the hidden state
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def cache_elements_per_token_per_layer(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class MoeSpec:
    num_experts: int  # routed experts per MoE layer
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int  # all shared experts together; 0 when there are none
    moe_layers: tuple[bool, ...]  # per layer: True where the MLP is the MoE block
    router_bias: bool  # DeepSeek-V3's e_score_correction_bias
    shared_expert_gate: bool  # Qwen2-MoE gates its shared expert with a hidden x 1 matrix

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (experts use moe.expert_intermediate_size)
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    norms_per_layer: int
    max_position_embeddings: int | None
    layer_windows: tuple[int | None, ...]  # per layer: sliding-window length, None = full
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    num_mtp_layers: int = 0  # multi-token-prediction layers: not in the served model
    dtype: str | None = None

    @cached_property
    def params(self) -> ParamCount:
        return count_params(self)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def has_sliding_window(self) -> bool:
        return any(w is not None for w in self.layer_windows)

    @property
    def q_dim(self) -> int:
        """Width of the attention output (heads x per-head value width)."""
        if self.mla is not None:
            return self.num_attention_heads * self.mla.v_head_dim
        return self.num_attention_heads * self.head_dim


def _positive_int(cfg: dict[str, Any], key: str, where: str, default: Any = ...) -> int:
    if key not in cfg or cfg[key] is None:
        if default is ...:
            raise SpecError(f"{where}: missing field {key!r}")
        return default
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
    return value


def _flag(cfg: dict[str, Any], key: str, where: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SpecError(f"{where}: field {key!r} must be true or false, got {value!r}")
    return value


def _layer_windows(cfg: dict[str, Any], model_type: str, layers: int, where: str) -> tuple:
    window = cfg.get("sliding_window")
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window <= 0
    ):
        raise SpecError(f"{where}: field 'sliding_window' must be a positive integer or null")
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers:
            raise SpecError(f"{where}: field 'layer_types' must list one type per layer ({layers})")
        if window is None and "sliding_attention" in layer_types:
            raise SpecError(
                f"{where}: 'layer_types' has sliding layers but 'sliding_window' is null"
            )
        return tuple(window if t == "sliding_attention" else None for t in layer_types)
    if window is None:
        return (None,) * layers
    if model_type in ("gemma2", "gemma3", "gemma3_text"):
        # Gemma-2 alternates: even layers are local (sliding), odd layers global.
        pattern = _positive_int(cfg, "sliding_window_pattern", where, 2)
        return tuple(None if (i + 1) % pattern == 0 else window for i in range(layers))
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if not _flag(cfg, "use_sliding_window", where, False):
            return (None,) * layers
        first = cfg.get("max_window_layers", layers)
        return tuple(window if i >= first else None for i in range(layers))
    # Mistral-style: a sliding_window that is set applies to every layer.
    return (window,) * layers


def _moe(cfg: dict[str, Any], layers: int, where: str) -> MoeSpec | None:
    experts_key = next(
        (k for k in ("n_routed_experts", "num_local_experts", "num_experts") if cfg.get(k)), None
    )
    if experts_key is None:
        return None
    num_experts = _positive_int(cfg, experts_key, where)
    per_token = _positive_int(cfg, "num_experts_per_tok", where)
    if per_token > num_experts:
        raise SpecError(
            f"{where}: field 'num_experts_per_tok' ({per_token}) exceeds {experts_key} ({num_experts})"
        )
    expert_width = _positive_int(cfg, "moe_intermediate_size", where, 0) or _positive_int(
        cfg, "intermediate_size", where
    )
    shared = 0
    if cfg.get("n_shared_experts"):
        shared = _positive_int(cfg, "n_shared_experts", where) * expert_width
    elif cfg.get("shared_expert_intermediate_size"):
        shared = _positive_int(cfg, "shared_expert_intermediate_size", where)
    first_dense = cfg.get("first_k_dense_replace", 0) or 0
    freq = _positive_int(cfg, "moe_layer_freq", where, 1)
    sparse_step = _positive_int(cfg, "decoder_sparse_step", where, 1)
    mlp_only = set(cfg.get("mlp_only_layers") or ())
    moe_layers = tuple(
        i >= first_dense and i % freq == 0 and (i + 1) % sparse_step == 0 and i not in mlp_only
        for i in range(layers)
    )
    return MoeSpec(
        num_experts=num_experts,
        experts_per_token=per_token,
        expert_intermediate_size=expert_width,
        shared_intermediate_size=shared,
        moe_layers=moe_layers,
        router_bias=cfg.get("topk_method") == "noaux_tc",
        shared_expert_gate=bool(cfg.get("shared_expert_intermediate_size")),
    )


def _mla(cfg: dict[str, Any], where: str) -> MlaSpec | None:
    if not cfg.get("kv_lora_rank"):
        return None
    return MlaSpec(
        q_lora_rank=_positive_int(cfg, "q_lora_rank", where, None),
        kv_lora_rank=_positive_int(cfg, "kv_lora_rank", where),
        qk_rope_head_dim=_positive_int(cfg, "qk_rope_head_dim", where),
        qk_nope_head_dim=_positive_int(cfg, "qk_nope_head_dim", where),
        v_head_dim=_positive_int(cfg, "v_head_dim", where),
    )


def parse_config(config: dict[str, Any], name: str) -> ModelSpec:
    """A ModelSpec from a config.json dict; `name` is used in error messages."""
    where = f"config.json of {name}"
    if not isinstance(config, dict):
        raise SpecError(f"{where}: expected a JSON object, got {type(config).__name__}")
    cfg = config
    # Multimodal wrappers (Llava, Gemma-3, Mistral-3) nest the language model's config.
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", "")}
    model_type = str(cfg.get("model_type") or "unknown")
    hidden = _positive_int(cfg, "hidden_size", where)
    layers = _positive_int(cfg, "num_hidden_layers", where)
    heads = _positive_int(cfg, "num_attention_heads", where)
    kv_heads = _positive_int(cfg, "num_key_value_heads", where, heads)
    if heads % kv_heads:
        raise SpecError(
            f"{where}: field 'num_key_value_heads' ({kv_heads}) must divide "
            f"num_attention_heads ({heads})"
        )
    head_dim = _positive_int(cfg, "head_dim", where, 0)
    if not head_dim:
        if hidden % heads:
            raise SpecError(
                f"{where}: missing field 'head_dim' and hidden_size ({hidden}) is not a "
                f"multiple of num_attention_heads ({heads})"
            )
        head_dim = hidden // heads
    attention_bias = _flag(cfg, "attention_bias", where, False)
    mla = _mla(cfg, where)
    num_mtp = cfg.get("num_nextn_predict_layers", 0) or 0
    return ModelSpec(
        name=name,
        model_type=model_type,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=_positive_int(cfg, "intermediate_size", where),
        vocab_size=_positive_int(cfg, "vocab_size", where),
        tie_word_embeddings=_flag(
            cfg, "tie_word_embeddings", where, model_type in _TIED_BY_DEFAULT
        ),
        qkv_bias=attention_bias or model_type in _QKV_BIAS_BY_DEFAULT,
        o_bias=attention_bias,
        mlp_bias=_flag(cfg, "mlp_bias", where, False),
        norms_per_layer=4 if model_type in _FOUR_NORMS else 2,
        max_position_embeddings=_positive_int(cfg, "max_position_embeddings", where, None),
        layer_windows=_layer_windows(cfg, model_type, layers, where),
        moe=_moe(cfg, layers, where),
        mla=mla,
        num_mtp_layers=int(num_mtp),
        dtype=cfg.get("torch_dtype") or cfg.get("dtype"),
    )


def load_config_file(path: str | os.PathLike[str]) -> ModelSpec:
    """Parse a config.json file, or the config.json inside a model directory."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read config.json at {str(p)!r}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_config(data, str(p))


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _tail(key: str) -> str:
    return key.split("/", 1)[-1]


# normalised name -> (repo, how, note); the full id and each listed alias are also indexed
# without an organisation ("deepseek-ai/DeepSeek-R1" -> "deepseek-r1").
_INDEX: dict[str, tuple[str, str, str | None]] = {}
for _repo, (_cfg, _aliases) in CATALOG.items():
    _INDEX[_norm(_repo)] = (_repo, EXACT, None)
    _INDEX.setdefault(_tail(_norm(_repo)), (_repo, SHORT_NAME, None))
    for _alias in _aliases:
        _note = ALIAS_NOTES.get(_alias)
        _entry = (_repo, STAND_IN if _note else ALIAS, _note)
        _INDEX[_norm(_alias)] = _entry
        _INDEX.setdefault(_tail(_norm(_alias)), _entry)

MODEL_NAMES: tuple[str, ...] = tuple(CATALOG)


@cache
def _catalog_model(repo: str) -> ModelSpec:
    return parse_config(CATALOG[repo][0], repo)


def _looks_like_path(name: str) -> bool:
    return name.endswith(".json") or os.path.exists(name)


def catalog_aliases(repo: str) -> tuple[tuple[str, str | None], ...]:
    """The names listed for a catalog entry, each with its note (None: another spelling)."""
    return tuple((a, ALIAS_NOTES.get(a)) for a in CATALOG[repo][1])


def _lookup(name: str) -> tuple[str, str, str | None] | None:
    key = _norm(name)
    hit = _INDEX.get(key)
    if hit is not None:
        return hit
    hit = _INDEX.get(_tail(key))
    if hit is not None:
        repo, how, note = hit
        if "/" in key and how in (EXACT, SHORT_NAME):
            # "someone/Llama-3.1-8B": the same name under another organisation
            org = name.strip().split("/", 1)[0]
            return repo, STAND_IN, f"matched by name; the catalog's entry is not from {org!r}"
        return hit
    if key.endswith("-instruct"):
        hit = _INDEX.get(_tail(key.removesuffix("-instruct")))
        if hit is not None:
            return hit[0], STAND_IN, hit[2] or INSTRUCT_NOTE
    return None


def resolve_model(name: str | os.PathLike[str]) -> tuple[ModelSpec, Resolved]:
    """A model by Hugging Face id or alias (case-insensitive), or a path to a config.json,
    with what the name resolved to and why."""
    if isinstance(name, os.PathLike):
        spec = load_config_file(name)
        return spec, Resolved("model", os.fspath(name), spec.name, CONFIG_FILE)
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"model must be a non-empty name or path, got {name!r}")
    hit = _lookup(name)
    if hit is not None:
        repo, how, note = hit
        return _catalog_model(repo), Resolved("model", name, repo, how, note)
    if _looks_like_path(name):
        spec = load_config_file(name)
        return spec, Resolved("model", name, spec.name, CONFIG_FILE)
    raise SpecError(
        f"unknown model {name!r} (not in the catalog and not a config.json path); "
        f"known: {', '.join(MODEL_NAMES)}"
    )


def get_model(name: str | os.PathLike[str] | ModelSpec) -> ModelSpec:
    """A model by Hugging Face id or alias (case-insensitive), or a path to a config.json."""
    if isinstance(name, ModelSpec):
        return name
    return resolve_model(name)[0]
