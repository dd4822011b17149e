"""
Hugging Face interop: checkpoints of `transformers` in and out of our GPT.

    convert.py    GPT-2 / Llama / MobileLLM directories (or hub names) -> GPT, and GPT -> a directory
                  that transformers loads with no custom code; `python -m huggingface.convert export ...`
    tokenizer.py  the tokenizer that goes with an imported model (GPT-2 BPE via tiktoken, else transformers)

Nothing here needs `transformers` except downloading by hub name and non-GPT-2 tokenizers.
"""
