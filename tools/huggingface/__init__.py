"""
Hugging Face interop: checkpoints of `transformers` in and out of our GPT.

    convert.py    GPT-2 / Llama / MobileLLM directories (or hub names) -> GPT, and GPT -> a directory
                  that transformers loads with no custom code; `python -m huggingface.convert export ...`
    tokenizer.py  the tokenizer that goes with an imported model (the directory's own files via transformers,
                  else GPT-2 BPE via tiktoken), and the tokenizer files an export writes (char, GPT-2, compact)

Nothing here needs `transformers` except downloading by hub name and reading a directory's tokenizer files.
"""
