"""Incremental decoding: the KV cache (decoding/cache.py) and the generation loop (decoding/generate.py)."""
