"""
The tokenizers, as a dataset's meta.json describes them:
    char      CharTokenizer: one id per character of meta["chars"]
    gpt2      GPT-2 BPE (tiktoken; offline from GPT2_TIKTOKEN_FILE when set)
    compact   a subset of GPT-2's tokens (paper 003, 2.1, chosen by tools/pangu/compact_vocab.py), meta["tokens"]
Which of them a meta.json names is read in one place, Vocabulary: the tokenizer here and the tools (exports,
inheritance) read its parts, and a kind a reader cannot use is one line. Then the prompt's ids, checked
(check_prompt, encode_start), and text as tokens come: whole characters only (TextStream, the tools' runners).
dataset.py finds the tokenizer of a dataset folder or a checkpoint (load_tokenizer, tokenizer_of).
"""

import base64
import codecs
import functools
import os
import sys
import unicodedata

from safety_net.configurator import UserError, one_line


# The GPT-2 pre-tokenization regex, as defined in OpenAI's gpt-2 encoder.py: English
# contractions, optionally space-prefixed runs of letters / digits / other symbols, and
# whitespace (a whitespace run keeps its last space for the following word).
GPT2_PAT_STR = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_EOT = "<|endoftext|>"
GPT2_EOT_ID = 50256
GPT2_VOCAB_SIZE = 50257


def get_gpt2_encoding(ranks_path=None):
    """The GPT-2 tiktoken encoding, offline when a local ranks file is configured.

    ranks_path (or env GPT2_TIKTOKEN_FILE) names a gpt2.tiktoken file; from it we build the same
    encoding tiktoken ships as "gpt2". Without one we ask tiktoken, which downloads (or uses its cache).
    """
    import tiktoken   # here, not at the top: a char-level run never pays for it
    source = "--gpt2_ranks" if ranks_path else "GPT2_TIKTOKEN_FILE"   # where the path came from, for the fix
    ranks_path = ranks_path or os.environ.get("GPT2_TIKTOKEN_FILE") or None
    if ranks_path is None:
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # tiktoken raises requests/OS/blobfile errors when offline
            raise UserError(f"could not load the GPT-2 BPE vocabulary ({one_line(e)}) "
                            "(fix: set GPT2_TIKTOKEN_FILE=PATH to a local gpt2.tiktoken ranks file: every script reads "
                            "it)") from None
    return _gpt2_encoding_from_file(os.path.abspath(ranks_path), source)


@functools.lru_cache(maxsize=4)
def _gpt2_encoding_from_file(path, source="GPT2_TIKTOKEN_FILE"):
    import tiktoken
    fix = f"(fix: point {source} at a gpt2.tiktoken ranks file)"
    if not os.path.isfile(path):
        raise UserError(f"GPT-2 ranks file not found: {path} {fix}")
    try:
        ranks = read_ranks(path)
    except Exception as e:
        raise UserError(f"could not read GPT-2 ranks file {path} ({one_line(e)}) {fix}") from None
    if len(ranks) != GPT2_EOT_ID:
        raise UserError(f"{path} has {len(ranks)} ranks, expected {GPT2_EOT_ID} for GPT-2 {fix}")
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT_STR, mergeable_ranks=ranks,
                             special_tokens={GPT2_EOT: GPT2_EOT_ID})


def read_ranks(path):
    """A .tiktoken ranks file: a line `base64(token) rank` per token. Read here: tiktoken.load keeps a copy of a
    local file in its cache, by path, and returned that copy after the file was replaced (a ranks file mended as
    the fix said was refused again, and a good one replaced was used still: a hunt)."""
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def compact_encoding(tokens, name="gpt2_compact"):
    """A tiktoken encoding over a subset of GPT-2's byte tokens, ids 0..len(tokens) (eot last).

    `tokens` must be listed in GPT-2 rank order: BPE merges by rank, so re-ranking the subset
    0..n-1 while preserving the order keeps GPT-2's merge priorities. All 256 single bytes are in
    the subset, so any text encodes losslessly.
    """
    import tiktoken
    ranks = {tok: i for i, tok in enumerate(tokens)}
    return tiktoken.Encoding(name=f"{name}_{len(tokens) + 1}", pat_str=GPT2_PAT_STR,
                             mergeable_ranks=ranks, special_tokens={GPT2_EOT: len(tokens)})


def check_char_count(n_chars):
    """prepare.py's char tokenizer stores ids as uint16: at most 65,536 distinct characters."""
    if n_chars > 2**16:
        raise UserError(f"the text has {n_chars:,} distinct characters, and the char tokenizer stores token ids "
                        f"as uint16: at most 65,536 (fix: a text with fewer distinct characters, or GPT-2 BPE: "
                        f"--tokenizer=gpt2)")


class CharTokenizer:
    """Character-level tokenizer from a list of symbols (id = position in the list)."""

    def __init__(self, chars):
        self.chars = list(chars)
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}
        self.vocab_size = len(self.chars)
        self.eot_token = None

    def encode(self, text):
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return [self.stoi[ch] for ch in text]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)

    def token_bytes(self, i):
        return self.chars[i].encode("utf-8")


class BPETokenizer:
    """A tiktoken encoding (GPT-2 or compact). '<|endoftext|>' in a prompt maps to the eot token."""

    def __init__(self, enc, vocab_size, eot_token):
        self.enc, self.vocab_size, self.eot_token = enc, vocab_size, eot_token

    def encode(self, text):
        return self.enc.encode(text, allowed_special={GPT2_EOT})

    def decode(self, ids):
        return self.enc.decode(list(ids))

    def token_bytes(self, i):
        """The bytes of token i: part of a character, at times (a streamed sample waits for the rest)."""
        return self.enc.decode_single_token_bytes(i)


TOKENIZER_KINDS = ("char", "gpt2", "compact")   # what meta.json's "tokenizer" may name (see the top of this file)


def gpt2_meta():
    """What meta.json says of GPT-2's BPE (a new dict each time: callers add their dataset's fields)."""
    return {"tokenizer": "gpt2", "vocab_size": GPT2_VOCAB_SIZE, "eot_token": GPT2_EOT_ID}


class Vocabulary:
    """What a dataset's meta.json says maps token ids to text, read and checked in one place: every part of the
    code that needs the tokenizer's kind asks a Vocabulary (the tokenizer below; the Hugging Face, ExecuTorch and
    GGUF exports; inheritance's GPT-2 ids; the tokenizing workers of tools.wikitext103) instead of reading
    meta["tokenizer"] itself. The kind and vocab_size are checked at once; each list when it is read, so a meta
    is only asked for what its reader needs. The parts:
        is_char_level   char: one id per character; the others are byte-level BPE
        chars()         char: the character of each id
        byte_tokens()   byte-level BPE: the bytes of each id before the end-of-text token, in GPT-2's rank order
        eot()           byte-level BPE: the id of <|endoftext|>, the last; None for char
        gpt2_ids()      byte-level BPE: GPT-2's id of each id (eot's too); None for char, which shares none
        encoding()      byte-level BPE: its tiktoken encoding
        describe()      a few words for a summary line
    A new kind: add it to TOKENIZER_KINDS and to the parts it has. A part it lacks is one line naming the kind
    (unhandled), so a reader that cannot use the new kind says so instead of taking it for another."""

    def __init__(self, meta, source="meta.json"):
        self.meta, self.source = meta, source
        self.kind = meta.get("tokenizer")
        if self.kind not in TOKENIZER_KINDS:
            raise UserError(f"{source} names tokenizer {self.kind!r}, which is none of {', '.join(TOKENIZER_KINDS)} "
                            f"(fix: prepare the dataset again, with prepare.py or the tool that wrote it)")
        self.size = meta.get("vocab_size")
        if not isinstance(self.size, int) or self.size < 1:
            raise UserError(f"{source} has no valid vocab_size (fix: prepare the dataset again)")
        if self.kind == "gpt2" and self.size != GPT2_VOCAB_SIZE:
            raise UserError(f"{source} says gpt2 with vocab_size {self.size}, not {GPT2_VOCAB_SIZE} "
                            f"(fix: prepare the dataset again)")
        self.is_char_level = self.kind == "char"

    def unhandled(self, part):
        """The error for a part this kind does not have (or not yet: a new kind), by the reader that asked."""
        return UserError(f"{self.source}'s tokenizer {self.kind!r} has no {part}, which this command needs "
                         f"(fix: a dataset with another tokenizer)")

    def chars(self):
        """char: vocab_size distinct strings, the character of each id."""
        if self.kind != "char":
            raise self.unhandled("characters")
        chars = self.meta.get("chars")
        if not (isinstance(chars, list) and all(isinstance(c, str) for c in chars)
                and len(set(chars)) == len(chars) == self.size):
            raise UserError(f"{self.source}'s chars are not {self.size} distinct characters (vocab_size) "
                            f"(fix: prepare the dataset again)")
        return chars

    def byte_tokens(self):
        """The bytes of ids 0..eot-1. A compact vocabulary's (paper 003's subset of GPT-2's tokens) must be
        vocab_size - 1 distinct tokens with all 256 single bytes (so any text encodes), then eot."""
        if self.kind == "gpt2":
            enc = self.encoding()
            return [enc.decode_single_token_bytes(i) for i in range(GPT2_EOT_ID)]
        if self.kind != "compact":
            raise self.unhandled("byte-level BPE tokens")
        fix = "(fix: prepare the dataset again)"
        try:
            tokens = [base64.b64decode(t, validate=True) for t in self.meta["tokens"]]
            eot = self.meta["eot_token"]
        except (KeyError, TypeError, ValueError):   # binascii.Error, bad base64, is a ValueError
            raise UserError(f"{self.source} has no valid compact 'tokens' / 'eot_token' {fix}") from None
        if not len(tokens) + 1 == self.size == eot + 1:
            raise UserError(f"{self.source}'s compact vocabulary has {len(tokens)} tokens and eot {eot}, not "
                            f"vocab_size - 1 = {self.size - 1} tokens then eot {fix}")
        singles = {t for t in tokens if len(t) == 1}
        if len(singles) != 256 or len(set(tokens)) != len(tokens):
            raise UserError(f"{self.source}'s compact vocabulary is not {len(tokens)} distinct byte tokens with all "
                            f"256 single bytes followed by eot {fix}")
        return tokens

    def eot(self):
        if self.kind == "char":
            return None
        if self.kind == "gpt2":
            return GPT2_EOT_ID
        if self.kind == "compact":
            self.byte_tokens()   # checks eot_token against the tokens and vocab_size
            return self.meta["eot_token"]
        raise self.unhandled("end-of-text token")

    def gpt2_ids(self):
        """GPT-2's id of every id: itself for GPT-2, meta["gpt2_ids"] then <|endoftext|> for a compact vocabulary
        (tools.pangu.compact_vocab); None for char."""
        if self.kind == "char":
            return None
        if self.kind == "gpt2":
            return list(range(self.size))
        if self.kind == "compact":
            ids = self.meta.get("gpt2_ids")
            if not (isinstance(ids, list) and len(ids) + 1 == self.size):
                raise UserError(f"{self.source}'s compact gpt2_ids are not vocab_size - 1 = {self.size - 1} GPT-2 "
                                f"ids (fix: prepare the dataset again)")
            return ids + [GPT2_EOT_ID]
        raise self.unhandled("GPT-2 ids")

    def encoding(self, ranks_path=None):
        """The tiktoken encoding; ranks_path: GPT-2's ranks file (get_gpt2_encoding)."""
        if self.kind == "gpt2":
            return get_gpt2_encoding(ranks_path)
        if self.kind == "compact":
            return compact_encoding(self.byte_tokens())
        raise self.unhandled("tiktoken encoding")

    def describe(self):
        if self.kind == "char":
            return f"char-level, {self.size} characters"
        if self.kind == "gpt2":
            return f"GPT-2 BPE, {self.size:,} tokens"
        if self.kind == "compact":
            return f"compact GPT-2 BPE (paper 003), {self.size:,} tokens"
        raise self.unhandled("description")


def tokenizer_from_meta(meta):
    """The tokenizer of a meta.json (Vocabulary: its parts must agree)."""
    vocab = Vocabulary(meta)
    if vocab.is_char_level:
        return CharTokenizer(vocab.chars())
    return BPETokenizer(vocab.encoding(), vocab.size, vocab.eot())


def check_prompt(tok, text, dataset, vocab_size=None):
    """One-line errors for a prompt the model cannot take: characters the (char-level) vocabulary lacks, an empty
    prompt without an eot token to stand for it, ids at or beyond the model's vocab_size (when given)."""
    known = getattr(tok, "stoi", None)
    if known is not None:
        unknown = sorted(set(text) - set(known))
        if unknown:
            listed = ", ".join(repr(ch) for ch in unknown)
            fix = "remove them from --start"
            # é typed as one character, the text's as e + an accent (or the other way round): the same
            # text to a reader, other characters to a char vocabulary (an exploration's Left item)
            for form in ("NFD", "NFC"):
                if set(unicodedata.normalize(form, text)) <= set(known):
                    fix = (f"the text writes them in Unicode's {form} form: give --start in that form, "
                           f"e.g. unicodedata.normalize('{form}', text) in Python")
                    break
            if text == "\n":   # the default --start, and a text without line ends
                fix = "a --start of characters the text has: a newline, the default, is not one of them"
            raise UserError(f"characters not in the vocabulary: {listed} "
                            f"(the model was trained on {dataset}) (fix: {fix})")
    try:
        ids = tok.encode(text)
    except (ValueError, KeyError) as e:
        raise UserError(f"cannot encode --start: {e} (the model was trained on {dataset}) "
                        f"(fix: change --start)") from None
    if not ids and getattr(tok, "eot_token", None) is None:
        fix = "give at least one character, or leave --start out: a newline"
        if known is not None and "\n" not in known:   # the default --start is refused too (a hunt)
            fix = "give at least one character the text has: a newline, the default, is not one of them"
        raise UserError(f"--start is empty (fix: {fix})")
    if ids and vocab_size is not None and max(ids) >= vocab_size:
        raise UserError(f"the prompt encodes to token id {max(ids)}, beyond the model's vocabulary of "
                        f"{vocab_size} (fix: use the tokenizer the model was trained with)")


def encode_start(tok, text, dataset, vocab_size=None):
    """Token ids of the prompt, checked (check_prompt); an empty BPE prompt is the eot token, "start of a
    document"."""
    check_prompt(tok, text, dataset, vocab_size)
    return tok.encode(text) or [tok.eot_token]


def render(tok, start_text, start_ids, ids):
    """The sample as text, beginning with the start text exactly as given. Decoding all ids at once
    keeps multi-byte characters that straddle the prompt boundary whole (BPE); the decoded prompt is
    then swapped for the user's text (they differ only for an empty BPE prompt, which became eot)."""
    prompt = tok.decode(start_ids)
    text = tok.decode(ids)
    if text.startswith(prompt):
        return start_text + text[len(prompt):]
    return start_text + tok.decode(ids[len(start_ids):])


class TextStream:
    """A sample printed as it is generated (tools.executorch.run, tools.llamacpp.run; sample.py's print_token
    does the same): add(bytes) each token's bytes as it comes (or add_token(id) with a tokenizer's
    token_bytes), end() after the last. An incremental UTF-8 decoder holds back a character until all its
    bytes are there (a GPT-2 BPE token can end inside one) and the rest is printed at once, flushed. Bytes that
    are not UTF-8 print as U+FFFD, as decoding the whole sample does: the text equals decoding it at the end."""

    def __init__(self, file=None, token_bytes=None):
        self.file = file   # None: sys.stdout when printing
        self.token_bytes = token_bytes   # id -> its bytes, for add_token (a tokenizer's token_bytes)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def write(self, text):
        if text:
            print(text, end="", file=self.file or sys.stdout, flush=True)

    def add(self, data):
        self.write(self.decoder.decode(data))

    def add_token(self, token):
        self.add(self.token_bytes(int(token)))

    def end(self):
        """What was held back (a character cut short at the end: U+FFFD), then a newline."""
        self.write(self.decoder.decode(b"", final=True) + "\n")
        self.decoder.reset()
