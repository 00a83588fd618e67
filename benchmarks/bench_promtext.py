"""Why infbench reads Prometheus text with its own parser: `infbench.promtext` against
`prometheus_client`'s text parser on the pages infbench reads.

    python benchmarks/bench_promtext.py [--repeats N]

Pages: a real vLLM 0.32 (CPU build) `/metrics` after a load (tests/fixtures/real_vllm; what the
run's once-a-second scrape reads, `parse_raw`) and two dcgm-exporter pages
(tests/fixtures/gpu; what the GPU probe reads strictly, `parse_strict`). Each reader turns a
page into samples (name, labels, value); `prometheus_client.parser.text_string_to_metric_families`
is consumed to the last sample. Times are the median of `--repeats` runs of 20 parses each,
the readers interleaved; CPU time of this process. Where prometheus_client refuses a page, the
table says so (the readers must take what real servers print).
Results go to benchmarks/results/promtext.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from machine_info import describe
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infbench.promtext import parse_raw, parse_strict  # noqa: E402

PAGES = {
    "vLLM 0.32 CPU /metrics": ROOT / "tests/fixtures/real_vllm/vllm-0.32.0-cpu-metrics.txt",
    "dcgm-exporter 2.0.13": ROOT / "tests/fixtures/gpu/dcgm_exporter_2.0.13.prom",
    "dcgm-exporter (k8s blog)": ROOT / "tests/fixtures/gpu/k8s_blog_dcgm_exporter.prom",
}
INNER = 20


def client_samples(text: str) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def per_parse_us(fn: Callable[[str], object], text: str) -> float:
    t = time.process_time()
    for _ in range(INNER):
        fn(text)
    return (time.process_time() - t) / INNER * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/promtext.md")
    args = ap.parse_args()
    readers: dict[str, Callable[[str], object]] = {
        "promtext.parse_raw (scrape)": parse_raw,
        "promtext.parse_strict (GPU probe)": parse_strict,
        "prometheus_client": client_samples,
    }
    rows = []
    for page, path in PAGES.items():
        text = path.read_text(encoding="utf-8")
        counts: dict[str, str] = {}
        for name, fn in readers.items():
            try:
                got = fn(text)
                counts[name] = str(got if isinstance(got, int) else len(got))  # type: ignore[arg-type]  # a list of samples or a count
            except Exception as exc:  # noqa: BLE001  # the table reports what the reader refused
                counts[name] = f"refused: {type(exc).__name__}: {str(exc)[:60]}"
        times: dict[str, list[float]] = {n: [] for n in readers}
        for _ in range(args.repeats):
            for name, fn in readers.items():
                if not counts[name].startswith("refused"):
                    times[name].append(per_parse_us(fn, text))
        med = {n: statistics.median(v) if v else None for n, v in times.items()}
        rows.append((page, len(text.splitlines()), counts, med))
    lines = ["# Prometheus text: infbench.promtext against prometheus_client's parser", "",
             f"Command: `python benchmarks/bench_promtext.py` · {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC  ",
             f"Machine: {describe('prometheus_client ' + _version())}  ",
             f"Each figure: median of {args.repeats} interleaved runs of {INNER} parses, CPU µs per page; samples read in brackets.", "",
             "| page | lines | " + " | ".join(readers) + " | prometheus_client / parse_raw |",
             "| --- | ---: |" + " ---: |" * (len(readers) + 1)]
    for page, n, counts, med in rows:
        cells = [f"{med[r]:,.0f} ({counts[r]})" if med[r] is not None else counts[r] for r in readers]
        ratio = (f"**{med['prometheus_client'] / med['promtext.parse_raw (scrape)']:.1f}x**"
                 if med["prometheus_client"] and med["promtext.parse_raw (scrape)"] else "-")
        lines.append(f"| {page} | {n} | " + " | ".join(cells) + f" | {ratio} |")
    lines += ["", "Reading: the run scrapes the target's `/metrics` once a second (per replica in a fleet) "
              "beside the load it measures, so the parser's CPU is taken from the client's hot path; "
              "the lenient reader is the hand-written one for that reason (the ratio above), and the "
              "strict one, read once per GPU sample, stays in the same module so the two agree on "
              "the format's corners (tests/unit/test_promtext.py)."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text, encoding="utf-8")
    return 0


def _version() -> str:
    from importlib.metadata import version

    return version("prometheus_client")


if __name__ == "__main__":
    raise SystemExit(main())
