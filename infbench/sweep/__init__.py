"""Load sweeps: a series of runs at rising load, linked in the store, and the analysis of the
throughput-latency curve (knee, goodput-max point, step-time line vs the roofline)."""
