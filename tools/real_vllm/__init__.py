"""A real vLLM (its CPU build) on loopback for the `real_engine` tests: install it in a virtual
environment of its own, make a tiny random-weight Llama locally, start and stop servers."""
