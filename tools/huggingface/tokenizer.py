"""
The tokenizer of an imported Hugging Face model, with the interface of prepare.py's tokenizers
(encode(text) -> ids, decode(ids) -> text, eot_token), so sample.py and eval.py use it unchanged.

  a directory with tokenizer files        ->  its own tokenizer through transformers (our exports write them)
  else GPT-2 models of GPT-2's vocabulary ->  GPT-2 BPE through tiktoken (offline via GPT2_TIKTOKEN_FILE)
Otherwise a one-line error says what is needed; eval.py still scores token files (--data_dir).

It also writes the tokenizer of one of our datasets (meta.json: char, gpt2, compact) as tokenizer.json &
co for `python -m tools.huggingface.convert export` (tokenizer_files, below).
"""

import json
import os
import re

from tools.huggingface import ConversionError, _first_line, refuse
from safety_net.tokenizers import GPT2_EOT, GPT2_VOCAB_SIZE, Vocabulary

HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


class TransformersTokenizer:
    """transformers' AutoTokenizer behind encode/decode. Special tokens are never added to the text;
    eot_token (bos, else eos) is what sample.py feeds for an empty prompt."""

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = len(tok)
        self.eot_token = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        self.bytes_of = None   # token_bytes' table, made on first use
        vocab = tok.get_vocab()
        model = getattr(getattr(tok, "backend_tokenizer", None), "model", None)
        if type(model).__name__ == "WordLevel" and all(len(t) == 1 for t in vocab):
            self.stoi = vocab   # a character vocabulary (our char-level export): prompts are checked as ours are

    def encode(self, text):
        try:
            return self.tok.encode(text, add_special_tokens=False)
        except Exception as e:   # the tokenizers library raises plain Exceptions (e.g. WordLevel's missing [UNK])
            raise ValueError(f"the model's tokenizer cannot encode it ({_first_line(e)})") from None

    def decode(self, ids):
        """The text; special tokens (end-of-text) skipped, as in the text sample.py streams (TokenBytes)."""
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def token_bytes(self, i):
        """The bytes token i stands for (TokenBytes): sample.py prints a sample as it comes."""
        if self.bytes_of is None:
            self.bytes_of = TokenBytes(self.tok.backend_tokenizer)
        return self.bytes_of(i)


class TokenBytes:
    """id -> the bytes a token of a Hugging Face tokenizer stands for, as its decoder writes them in a text: a
    byte-level BPE token is spelled in GPT-2's byte alphabet (tools/huggingface/tokenizer.py) and may hold part of a
    character; a SentencePiece piece (Llama, MobileLLM) writes its "\u2581" as a space, and a byte-fallback piece
    "<0xE2>" is that byte (decoded alone, a piece lost its space and a byte became U+FFFD: a hunt); a char-level
    token is its character. A special token (end-of-text) and an id without a token (a model's padding row) stand
    for nothing, as tokenizer.decode skips them."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.byte_level = type(tokenizer.decoder).__name__ == "ByteLevel"
        self.sentencepiece = writes_space_marks(tokenizer)
        self.byte_of = {ch: b for b, ch in gpt2_byte_to_unicode().items()}
        self.special = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}

    def __call__(self, token):
        text = self.tokenizer.id_to_token(token)
        if text is None or token in self.special:
            return b""
        if self.byte_level:
            return bytes(self.byte_of[ch] for ch in text)
        if self.sentencepiece:
            byte = BYTE_PIECE.fullmatch(text)
            if byte:
                return bytes([int(byte.group(1), 16)])
            return text.replace(SPACE_MARK, " ").encode("utf-8")
        return self.tokenizer.decode([token]).encode("utf-8")


def writes_space_marks(tokenizer):
    """Whether a tokenizer's decoder turns SentencePiece's space mark into a space: a Metaspace decoder, or a
    Replace of the mark in a Sequence of them (Llama's, MobileLLM's)."""
    decoder = json.loads(tokenizer.to_str())["decoder"] or {}
    steps = decoder.get("decoders", [decoder])
    return any(step["type"] == "Metaspace" or step["type"] == "Replace" and step["pattern"] == {"String": SPACE_MARK}
               for step in steps)


SPACE_MARK = "\u2581"   # SentencePiece's space
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")   # SentencePiece's byte fallback: one byte of a character


def tokenizer_for(info):
    """The tokenizer for load_pretrained's info (architecture, hf_config, directory, source): the directory's
    own tokenizer files when it has them (our exports write them), else GPT-2 BPE for a GPT-2-vocabulary model."""
    vocab = info["hf_config"].get("vocab_size", 0)
    gpt2 = info["architecture"] == "gpt2" and vocab >= GPT2_VOCAB_SIZE
    directory = info["directory"]
    has_files = any(os.path.isfile(os.path.join(directory, f)) for f in HF_TOKENIZER_FILES)
    what = f"'{info['source']}' ({info['architecture']}, vocabulary {vocab})"
    if has_files:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            if gpt2:   # GPT-2's vocabulary is built in; reading the directory's files would need transformers
                return gpt2_tokenizer()
            raise ConversionError(f"the tokenizer of {what} needs transformers (fix: pip install transformers, or "
                                  f"evaluate token files with --data_dir)") from None
        try:   # files only: no code from the directory is run (trust_remote_code stays off)
            tok = TransformersTokenizer(AutoTokenizer.from_pretrained(directory, trust_remote_code=False))
        except Exception as e:  # missing sentencepiece/tokenizers backends, broken files, ...
            raise ConversionError(f"cannot load the tokenizer of {what}: {_first_line(e)} "
                                  f"(fix: install what it names, or evaluate token files with --data_dir)") from None
        refuse(tok.vocab_size > 1 and not (vocab and tok.vocab_size > vocab), f"the tokenizer files of {what} "
               f"hold {tok.vocab_size} token(s), which do not fit the model's vocabulary (fix: put the model's own "
               f"tokenizer files there, or evaluate token files with --data_dir)")
        return tok
    if gpt2:
        return gpt2_tokenizer()
    raise ConversionError(f"no tokenizer for {what}: only GPT-2 BPE is built in and the directory has no "
                          f"tokenizer files (fix: add the model's tokenizer files ({', '.join(HF_TOKENIZER_FILES)}) "
                          f"and pip install transformers, or evaluate token files with --data_dir)")


def gpt2_tokenizer():
    from safety_net.tokenizers import GPT2_EOT_ID, BPETokenizer, get_gpt2_encoding
    return BPETokenizer(get_gpt2_encoding(), GPT2_VOCAB_SIZE, GPT2_EOT_ID)


# ----------------------------------------------------------------------------------------------
# export: the tokenizer of a checkpoint's dataset as files transformers loads offline
# ----------------------------------------------------------------------------------------------
# tokenizer.json is the `tokenizers` library's serialisation, written here as plain JSON (no `tokenizers` or
# transformers needed to export). Our choices, checked in tests/test_huggingface.py against the project's own
# encoders on tinyshakespeare:
#   gpt2, compact  byte-level BPE: GPT-2's regex split (tokenizers.GPT2_PAT_STR) then GPT-2's byte ->
#                  printable-character table; vocab = the tiktoken ranks (id = rank), merges = each token's two
#                  merge parents in rank order; ignore_merges (a piece that is a whole token is taken as one,
#                  as tiktoken does); <|endoftext|> a special token (bos = eos = pad)
#   char           WordLevel over single characters, a pre-tokenizer that isolates every character and a
#                  decoder that concatenates them; a character outside the vocabulary is an error, never dropped

EACH_CHARACTER = r"[\s\S]"   # one match per character, newlines included
UNKNOWN = "<unk>"            # named by WordLevel but not in the vocabulary: an unknown character is an error


def gpt2_byte_to_unicode():
    """GPT-2's table from bytes to printable characters (its encoder.py): the 188 printable Latin-1 bytes map
    to themselves, the other 68 (controls, space, ...) to U+0100 onwards in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def bpe_vocab_and_merges(tokens):
    """(vocab, merges) of a byte-level BPE whose ranks are the positions of `tokens` (bytes, in rank order, the
    256 single bytes among them): vocab maps each token's printable spelling to its rank; merges lists, in rank
    order, the two lower-ranked parts each multi-byte token is merged from (BPE run on the token itself with the
    merges ranked below it: tools.pangu.compact_vocab.merge_parents)."""
    from tools.pangu.compact_vocab import merge_parents
    table = gpt2_byte_to_unicode()

    def spell(token):
        return "".join(table[b] for b in token)

    ranks = {token: rank for rank, token in enumerate(tokens)}
    vocab = {spell(token): rank for token, rank in ranks.items()}
    merges = [[spell(part) for part in merge_parents(token, ranks)] for token in tokens if len(token) > 1]
    return vocab, merges


def byte_level_bpe(tokens, eot):
    """tokenizer.json of a GPT-2-style BPE over `tokens` (rank order) with <|endoftext|> as id `eot`."""
    from safety_net.tokenizers import GPT2_PAT_STR
    vocab, merges = bpe_vocab_and_merges(tokens)
    vocab[GPT2_EOT] = eot
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": eot, "content": GPT2_EOT, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GPT2_PAT_STR}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }


def char_level(chars):
    """tokenizer.json mapping each character of `chars` to its position."""
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": EACH_CHARACTER}, "behavior": "Isolated",
                          "invert": False},
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": {ch: i for i, ch in enumerate(chars)}, "unk_token": UNKNOWN},
    }


def tokenizer_files(meta, model_vocab_size, block_size, source="meta.json"):
    """({file name: JSON object}, eot id or None) for the tokenizer meta.json describes (tokenizers.Vocabulary: char,
    gpt2, compact), refused with a one-line reason when it does not fit a model of model_vocab_size tokens."""
    vocab = Vocabulary(meta, source)   # the kind, and each part it has, checked there
    eot = vocab.eot()
    if vocab.is_char_level:
        chars = vocab.chars()
        # tokenizer.json splits text into single characters: a longer string would never be one token
        refuse(all(len(c) == 1 for c in chars),
               f"{source} has no list of distinct single characters in 'chars' (fix: prepare the dataset again)")
        tokenizer = char_level(chars)
    else:
        tokenizer = byte_level_bpe(vocab.byte_tokens(), eot)
    size = len(tokenizer["model"]["vocab"])
    refuse(size <= model_vocab_size, f"the tokenizer of {source} has {size} tokens, more than the model's "
           f"vocab_size {model_vocab_size}: its ids would not fit (fix: export with the dataset the model was "
           f"trained on)")
    names = ("bos_token", "eos_token", "unk_token", "pad_token")
    special = {name: GPT2_EOT for name in names} if eot is not None else {}
    config = dict(special, tokenizer_class="PreTrainedTokenizerFast", model_max_length=block_size,
                  clean_up_tokenization_spaces=False, add_bos_token=False, add_eos_token=False)
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config, "special_tokens_map.json": special}, eot


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.huggingface.tokenizer is a library, not a command (fix: the commands are in docs/reference.md)")
