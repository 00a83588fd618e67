"""Writes a tiny LoRA adapter for the local tiny Llama with peft: seeded random A and B on the
attention projections, saved as peft saves any adapter (adapter_config.json and
adapter_model.safetensors), which vLLM's --lora-modules NAME=DIR loads. Runs inside the vLLM
environment (peft, transformers, torch); nothing is fetched.

    python make_adapter.py MODEL_DIR OUT_DIR [--rank 8] [--seed 0]

`write_adapter` runs it in the vLLM environment from the project's (the tests do).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def write_adapter(out: Path, rank: int = 8, seed: int = 0) -> Path:
    """An adapter for the installed tiny Llama, written to `out` (the vLLM environment's
    python runs this file)."""
    from tools.real_vllm import install

    subprocess.run([str(install.python()), __file__, str(install.MODEL), str(out), "--rank",
                    str(rank), "--seed", str(seed)], check=True, capture_output=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    base = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
    config = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0,
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                        task_type="CAUSAL_LM", init_lora_weights=False)  # random B: it changes outputs
    model = get_peft_model(base, config)
    model.save_pretrained(args.out, safe_serialization=True)
    print(f"adapter (rank {args.rank}) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
