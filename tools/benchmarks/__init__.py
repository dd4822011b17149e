"""Benchmark code shared by tools/bench.py and tools/compare.py: measure.py (timing, peak memory, a training step,
inference and sampling), entries.py (the models bench measures) and report.py (its tables and --out files)."""
