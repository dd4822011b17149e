"""Everything beyond the core: comparisons, benchmarks, evaluation, Hugging Face conversion, the PanGu tools.
Run them from the repository root as `python -m tools.NAME`. They import the core; the core never imports them."""
