"""Probes: readers of what other tools recorded about a serving system, into the store.

`probes.traces` imports profiler traces (PyTorch profiler / Kineto JSON, Nsight Systems
SQLite exports) into the store's trace tables and analyses their timelines. A probe writes
rows; playbooks read them back with SQL, so a diagnosis never depends on a probe's code.
"""
