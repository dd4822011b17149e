"""Benchmark code: measure.py, entries.py and report.py (shared by bench.py, the GPU suite and compare.py),
plain_gpt_speed.py, and the one-command GPU suite (gpu_suite.py, run by `python bench.py --mode=gpu`)."""
