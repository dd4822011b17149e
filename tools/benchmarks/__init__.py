"""Benchmark code shared by tools/bench.py, tools/compare.py, tools/plan.py and tools/gpu_check.py: measure.py
(timing, peak memory, a training step, inference and sampling), entries.py (the models bench and plan measure) and
report.py (bench's tables and --out files)."""
