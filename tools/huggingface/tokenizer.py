"""
The tokenizer of an imported Hugging Face model, with the interface of prepare.py's tokenizers
(encode(text) -> ids, decode(ids) -> text, eot_token), so sample.py and eval.py use it unchanged.

  GPT-2 models with GPT-2's vocabulary  ->  GPT-2 BPE through tiktoken (offline via GPT2_TIKTOKEN_FILE)
  anything else                         ->  the model directory's own tokenizer through transformers,
                                            when transformers is installed and the files are there
Otherwise a one-line error says what is needed; eval.py still scores token files (--data_dir).
"""

import os

from tools.huggingface.convert import ConversionError

GPT2_VOCAB_SIZE = 50257
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


class TransformersTokenizer:
    """transformers' AutoTokenizer behind encode/decode. Special tokens are never added to the text;
    eot_token (bos, else eos) is what sample.py feeds for an empty prompt."""

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = len(tok)
        self.eot_token = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False)

    def decode(self, ids):
        return self.tok.decode(list(ids))


def tokenizer_for(info):
    """The tokenizer for load_pretrained's info (architecture, hf_config, directory, source)."""
    vocab = info["hf_config"].get("vocab_size", 0)
    if info["architecture"] == "gpt2" and vocab >= GPT2_VOCAB_SIZE:
        from dataset import GPT2_EOT_ID, BPETokenizer, get_gpt2_encoding
        return BPETokenizer(get_gpt2_encoding(), GPT2_VOCAB_SIZE, GPT2_EOT_ID)
    directory = info["directory"]
    has_files = any(os.path.isfile(os.path.join(directory, f)) for f in HF_TOKENIZER_FILES)
    what = f"'{info['source']}' ({info['architecture']}, vocabulary {vocab})"
    if not has_files:
        raise ConversionError(f"no tokenizer for {what}: only GPT-2 BPE is built in and the directory has no "
                              f"tokenizer files (fix: add the model's tokenizer files ({', '.join(HF_TOKENIZER_FILES)}) "
                              f"and pip install transformers, or evaluate token files with --data_dir)")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConversionError(f"the tokenizer of {what} needs transformers (fix: pip install transformers, or "
                              f"evaluate token files with --data_dir)") from None
    try:
        return TransformersTokenizer(AutoTokenizer.from_pretrained(directory))
    except Exception as e:  # missing sentencepiece/tokenizers backends, broken files, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConversionError(f"cannot load the tokenizer of {what}: {first} "
                              f"(fix: install what it names, or evaluate token files with --data_dir)") from None
