"""
GPT-2- and Llama-shaped checkpoints as GGUF files for llama.cpp (tools/llamacpp/export.py).
"""
