"""infbench: benchmarking and diagnostics for production LLM inference clusters."""

__version__ = "0.1.0"
