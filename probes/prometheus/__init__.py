"""Prometheus as a source: a run's window of server-side series, pulled into the store.

`PrometheusClient` (client.py) speaks the HTTP API (`query_range`, `query`, `targets`) with
a bearer token, a CA file or no verification, and one timeout; its errors are
`PrometheusError` with a `kind`. `pull_run` (pull.py) range-queries a stored run's window
(vLLM, SGLang, dcgm-exporter and node series of the run's target) into `metric_samples`
(source 'prometheus') and `prometheus_pulls`; it never fails the run. `window_histogram`
(histogram.py) recomputes percentiles from the stored buckets for any window.
"""

from probes.prometheus.client import (
    PrometheusClient,
    PrometheusError,
    QueryResult,
    Series,
    read_token,
)
from probes.prometheus.histogram import WindowHistogram, histogram_quantile, window_histogram
from probes.prometheus.pull import PullReport, pull_run

__all__ = [
    "PrometheusClient",
    "PrometheusError",
    "PullReport",
    "QueryResult",
    "Series",
    "WindowHistogram",
    "histogram_quantile",
    "pull_run",
    "read_token",
    "window_histogram",
]
