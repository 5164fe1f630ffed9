"""Benchmarks run by `make bench`: each bench/bench_*.py module has main(), which prints
figures measured side by side in one run (ratios, not absolute timings alone)."""
