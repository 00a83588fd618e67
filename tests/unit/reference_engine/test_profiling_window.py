"""The profile's window on the step loop: a request sent after /start_profile answered is
profiled from its first step, even when the loop's own poll ran before the start arrived (the
engine thread driven by hand here, so that interleaving is the test's, not the scheduler's)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from reference_engine.config import EngineConfig
from reference_engine.engine import Engine
from reference_engine.request import SamplingParams


@pytest.mark.parametrize(("warm_steps", "max_tokens"), [(0, 4), (3, 7)])
def test_a_request_sent_after_start_is_profiled_from_its_first_step(
        tmp_path: Path, warm_steps: int, max_tokens: int) -> None:
    eng = Engine(EngineConfig(executor="sim", profile_dir=str(tmp_path), max_model_len=512))
    try:
        if warm_steps:  # steps before the profile: never in it
            eng.add_request("warm", list(range(40)), SamplingParams(max_tokens=warm_steps,
                                                                  ignore_eos=True), lambda o: None)
            while eng.step() is not None:
                pass
        # the loop polled (nothing pending), then the start came, then the request
        eng.profiler.poll(eng.stats().num_steps + 1)
        eng.profiler.request_start()
        eng.add_request("r", list(range(20)), SamplingParams(max_tokens=max_tokens,
                                                           ignore_eos=True), lambda o: None)
        first = eng.stats().num_steps + 1
        ran = []
        while (rec := eng.step()) is not None:
            ran.append(rec["step_id"])
        stopper = threading.Thread(target=lambda: paths.append(eng.profiler.request_stop(30)))
        paths: list[Path] = []
        stopper.start()
        while stopper.is_alive():  # the next step's poll applies the stop and writes the trace
            eng.step()
            stopper.join(0.01)
    finally:
        eng.stop()
    assert ran and ran[0] == first
    doc = json.loads(paths[0].read_text())
    traced = [int(e["name"].split("#")[1]) for e in doc["traceEvents"]
              if e.get("name", "").startswith("engine_step#")]
    assert traced == ran
