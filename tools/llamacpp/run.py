"""
Greedy text from a GGUF file in llama.cpp (through the llama_cpp package), re-priming the window at the model's
context length as sample.py does, so the text equals `sample.py --temperature=0`:

    python -m tools.llamacpp.run --gguf=model.gguf --start="War is " --max_new_tokens=200

The text appears as it is generated (a multi-byte character once all its bytes are there); Ctrl-C stops it there,
exit code 130.

(llama.cpp's own `llama-cli -m model.gguf -p "War is " --temp 0` shifts its context differently once it is full.)
"""
import os
import sys
import time

from safety_net.configurator import UserError, run_command

DEFAULTS = dict(gguf="model.gguf", start="\n", max_new_tokens=500, num_threads=0)   # 0: every CPU; as sample.py


def require_llama_cpp():
    """One line when the llama_cpp package is missing (it is optional: never in CI)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        raise UserError("llama_cpp is not installed (fix: pip install llama-cpp-python; it builds llama.cpp from "
                        "source, ~20 minutes on 2 cores)") from None


def load(path, num_threads=1):
    from llama_cpp import Llama
    # f32 keys/values (llama.cpp's default cache is f16), so an f32 file computes our logits to float noise
    # (logits_all: llama_cpp keeps no logits otherwise, and its scores array would be read uninitialised)
    return Llama(model_path=path, n_ctx=0, n_threads=num_threads, n_threads_batch=num_threads, type_k=0, type_v=0,
                 logits_all=True, verbose=False)


def context_length(llm):
    """The model's block_size, from the file (llm.n_ctx() is the context llama.cpp allocated: rounded up to 256)."""
    return int(llm.metadata[llm.metadata["general.architecture"] + ".context_length"])


def greedy_tokens(llm, ids, max_new_tokens, n_vocab):
    """Yield max_new_tokens greedy tokens after ids, each as soon as it is chosen, among the first n_vocab (a char
    vocabulary's padded end-of-text is left out); the window is re-primed with its newest half when it is full, as
    model.generate does. Only the window is kept: a long run holds no more than block_size + 1 ids."""
    import numpy as np
    block_size = context_length(llm)
    window, prime = list(ids), True
    for _ in range(max_new_tokens):
        if len(window) > block_size:
            window, prime = window[-max(1, block_size // 2):], True
        if prime:
            llm.reset()
            llm.eval(window)
            prime = False
        else:
            llm.eval(window[-1:])
        token = int(np.argmax(llm.scores[llm.n_tokens - 1][:n_vocab]))
        window.append(token)
        yield token


def model_vocab(llm):
    """The tokenizer's ids, as the export wrote them (sample.py draws among them: not a padded model's other rows,
    nor the end-of-text a char vocabulary's file appends); all of the file's for a GGUF from elsewhere."""
    from tools.llamacpp.export import MODEL_VOCAB_KEY
    return int(llm.metadata.get(MODEL_VOCAB_KEY, llm.n_vocab()))


def check_gguf(path):
    """One line for a GGUF file whose vocabulary does not fit its model, read with the gguf package before llama.cpp
    loads it (llama.cpp takes a damaged key as it comes, or fails on it with a traceback): the tokens (strings, as
    many as the embedding has rows), their types, the end-of-text ids and our own MODEL_VOCAB_KEY (1..n_vocab)."""
    import gguf
    from tools.llamacpp.export import MODEL_VOCAB_KEY
    fix = "(fix: export it again with python -m tools.llamacpp.export)"
    try:
        reader = gguf.GGUFReader(path)
        fields = {name: (field.types, field.contents()) for name, field in reader.fields.items()}
        rows = {t.name: [int(n) for n in t.shape] for t in reader.tensors}
    except Exception as e:   # the reader raises ValueError, KeyError, struct and numpy errors on a damaged file
        raise UserError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e}) {fix}") from None
    types, tokens = fields.get("tokenizer.ggml.tokens", ([], None))
    if not (isinstance(tokens, list) and tokens and all(isinstance(t, str) for t in tokens)):
        raise UserError(f"{path} has no vocabulary: tokenizer.ggml.tokens is missing or not a list of strings {fix}")
    n_vocab = len(tokens)
    embedding = rows.get("token_embd.weight", [0, n_vocab])
    if embedding[-1] != n_vocab:
        raise UserError(f"{path} has {n_vocab} tokens but {embedding[-1]} embedding rows {fix}")
    token_types = fields.get("tokenizer.ggml.token_type", ([], [0] * n_vocab))[1]
    if not isinstance(token_types, list) or len(token_types) != n_vocab:
        raise UserError(f"{path}'s tokenizer.ggml.token_type does not list the {n_vocab} tokens {fix}")
    integer = (gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32, gguf.GGUFValueType.UINT64)
    bounds = {"tokenizer.ggml.bos_token_id": (0, n_vocab - 1), "tokenizer.ggml.eos_token_id": (0, n_vocab - 1),
              MODEL_VOCAB_KEY: (1, n_vocab)}
    for key, (low, high) in bounds.items():
        if key not in fields:
            continue
        types, value = fields[key]
        if types[0] not in integer or not low <= value <= high:
            raise UserError(f"{path}'s {key} is {value!r} ({types[0].name}), not an integer in [{low}, {high}] "
                            f"for its {n_vocab} tokens {fix}")


def encode_exactly(llm, text, path):
    """llama.cpp's token ids of `text`, refused in one line unless they decode back to it: llama.cpp drops what its
    vocabulary cannot spell without a word (a character a char-level vocabulary lacks)."""
    ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    back = llm.detokenize(ids).decode("utf-8", errors="replace")
    if back != text:
        lost = ", ".join(repr(ch) for ch in sorted(set(text) - set(back))) or "part of it"
        raise UserError(f"llama.cpp cannot encode --start with the vocabulary of {path}: it would drop {lost} "
                        f"(fix: remove them from --start)")
    return ids


def run(cfg):
    from safety_net.runtime import check_num_threads
    from safety_net.sampling import read_prompt
    check_num_threads(cfg["num_threads"])
    start = read_prompt(cfg["start"])   # the text, or FILE:path's, as sample.py reads it
    if not isinstance(cfg["max_new_tokens"], int) or cfg["max_new_tokens"] < 0:   # 0: as sample.py (a hunt)
        raise UserError(f"--max_new_tokens must be an integer >= 0, got {cfg['max_new_tokens']!r} "
                        f"(fix: e.g. --max_new_tokens=200)")
    if not os.path.isfile(cfg["gguf"]):
        raise UserError(f"no file {cfg['gguf']} (fix: write one with python -m tools.llamacpp.export)")
    check_gguf(cfg["gguf"])
    require_llama_cpp()
    try:
        llm = load(cfg["gguf"], cfg["num_threads"] or os.cpu_count())
    except ValueError as e:   # llama_cpp's answer to a file llama.cpp cannot load
        raise UserError(f"llama.cpp cannot load {cfg['gguf']} ({e}) (fix: write it with python -m "
                        f"tools.llamacpp.export)") from None
    ids = encode_exactly(llm, start, cfg["gguf"])
    if not ids:
        raise UserError("--start is empty (fix: give at least one character)")
    t0 = time.perf_counter()
    stream_text(llm, start, ids, cfg["max_new_tokens"])
    dt = time.perf_counter() - t0
    print(f"{cfg['max_new_tokens']} tokens in {dt:.2f}s ({cfg['max_new_tokens'] / max(dt, 1e-9):.1f} tokens/s)",
          file=sys.stderr)


def stream_text(llm, start, ids, max_new_tokens):
    """Print start, then each greedy token as it comes (llama.cpp's bytes of it: a GPT-2 BPE token may hold part of
    a character, printed once the character is whole), then a newline. Ctrl-C stops it: exit code 130."""
    from safety_net.tokenizers import TextStream
    stream = TextStream()
    stream.write(start)
    for token in greedy_tokens(llm, ids, max_new_tokens, model_vocab(llm)):
        stream.add(llm.detokenize([token]))
    stream.end()


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
