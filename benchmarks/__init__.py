"""Benchmark scripts and the one-command GPU suite (gpu_suite.py, run by `python bench.py --mode=gpu`)."""
