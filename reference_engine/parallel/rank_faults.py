"""What the `--fault` specs that name a rank (faults.py) make one rank do.

`hang:rank=R,at_step=N`: rank R takes step N's work from rank 0 and then enters no
collective; the others block inside the step's first collective, as behind a rank stuck in a
kernel or a Python deadlock. `slow-link:rank=R,factor=F`: each collective on rank R lasts F
times what its transfer took. `mismatch:rank=R,at_step=N`: rank R issues an all-gather where
the others issue step N's first all-reduce (op and output size differ at one sequence id).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_engine.faults import Faults, FaultSpecError


@dataclass(frozen=True)
class RankFaults:
    hang_at_step: int | None = None
    mismatch_at_step: int | None = None
    slow_factor: float = 1.0

    @property
    def labels(self) -> list[str]:
        out = []
        if self.hang_at_step is not None:
            out.append("hang")
        if self.slow_factor > 1.0:
            out.append("slow-link")
        if self.mismatch_at_step is not None:
            out.append("mismatch")
        return out


def check_rank_faults(faults: Faults, executor: str, world: int) -> None:
    """Refuse rank faults the configuration cannot carry, in one line naming the fault."""
    for spec in faults.rank_specs:
        if executor != "torch" or world < 2:
            raise FaultSpecError(f"fault {spec}: needs --executor torch with "
                                 f"--tensor-parallel-size >= 2 (real ranks to act on)")
        if int(spec.params["rank"]) >= world:
            raise FaultSpecError(f"fault {spec}: rank {int(spec.params['rank'])} is outside "
                                 f"0..{world - 1} (tensor_parallel_size {world})")


def for_rank(faults: Faults, rank: int) -> RankFaults:
    hang = mismatch = None
    slow = 1.0
    for spec in faults.rank_specs:
        if int(spec.params["rank"]) != rank:
            continue
        if spec.kind == "hang":
            hang = int(spec.params["at_step"])
        elif spec.kind == "mismatch":
            mismatch = int(spec.params["at_step"])
        elif spec.kind == "slow-link":
            slow = float(spec.params["factor"])
    return RankFaults(hang, mismatch, slow)
