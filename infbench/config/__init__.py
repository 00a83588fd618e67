"""Engine configurations: capture, normalise, diff ranked by impact, bisect by measurement.

`capture` reads a configuration from a server log, `vllm collect-env` output, an SGLang log,
a TensorRT-LLM option file or a live server (`vllm`, `sglang`, `trtllm`, `endpoint`; the
grammar of engine reprs is in `pyrepr`, YAML in `miniyaml`); `normalize` maps every engine
and version into one key space; `store` keeps captures in the `configs` tables; `run_link`
captures what a load-test target exposed and links it to the run. `catalog` holds the
defaults of each engine version and the knobs' expected effects (data files in
`catalog/`), `impact` prices changes with `infbench.specs`, `diff` ranks the differences
and `render` prints them; `bisect` finds the culprit by launching and measuring.
"""
