"""
Hugging Face interop: checkpoints of `transformers` in and out of our GPT.

    convert.py    GPT-2 / Llama / MobileLLM directories (or hub names) -> GPT, and GPT -> a directory
                  that transformers loads with no custom code; `python -m tools.huggingface.convert export ...`
    tokenizer.py  the tokenizer that goes with an imported model (the directory's own files via transformers,
                  else GPT-2 BPE via tiktoken), and the tokenizer files an export writes (char, GPT-2, compact)

    sample.py     sampling from a Hugging Face model with sample.py's options
Nothing here needs `transformers` except reading a directory's tokenizer files; downloading by hub name needs
`huggingface_hub`.
"""

from safety_net.configurator import UserError


class ConversionError(UserError):
    """A checkpoint or model that cannot be converted; the message is one line with the reason and a fix."""


def refuse(ok, msg):
    if not ok:
        raise ConversionError(msg)


def _first_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
