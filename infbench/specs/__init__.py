"""Hardware and model specs and the arithmetic of serving (standard library only).

Contract (docs/interfaces.md): `get_gpu`, `get_model`, `get_format`, `GpuSpec`,
`ModelSpec`, `SpecError`; `roofline.step_time` and `memory.plan_memory`.
"""

from infbench.specs.errors import SpecError
from infbench.specs.formats import FormatSpec, get_format
from infbench.specs.gpus import GPUS, GpuSpec, get_gpu
from infbench.specs.models import MODEL_NAMES, ModelSpec, get_model, load_config_file, parse_config

__all__ = [
    "GPUS",
    "MODEL_NAMES",
    "FormatSpec",
    "GpuSpec",
    "ModelSpec",
    "SpecError",
    "get_format",
    "get_gpu",
    "get_model",
    "load_config_file",
    "parse_config",
]
