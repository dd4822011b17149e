"""
Greedy text from a GGUF file in llama.cpp (through the llama_cpp package), re-priming the window at the model's
context length as sample.py does, so the text equals `sample.py --temperature=0`:

    python -m tools.llamacpp.run --gguf=model.gguf --start="War is " --max_new_tokens=200

(llama.cpp's own `llama-cli -m model.gguf -p "War is " --temp 0` shifts its context differently once it is full.)
"""
import os
import sys
import time

from configurator import UserError, run_command

DEFAULTS = dict(gguf="model.gguf", start="\n", max_new_tokens=200, num_threads=1)   # 0: every CPU


def load(path, num_threads=1):
    from llama_cpp import Llama
    # f32 keys/values (llama.cpp's default cache is f16), so an f32 file computes our logits to float noise
    # (logits_all: llama_cpp keeps no logits otherwise, and its scores array would be read uninitialised)
    return Llama(model_path=path, n_ctx=0, n_threads=num_threads, n_threads_batch=num_threads, type_k=0, type_v=0,
                 logits_all=True, verbose=False)


def context_length(llm):
    """The model's block_size, from the file (llm.n_ctx() is the context llama.cpp allocated: rounded up to 256)."""
    return int(llm.metadata[llm.metadata["general.architecture"] + ".context_length"])


def greedy(llm, ids, max_new_tokens, n_vocab):
    """ids + max_new_tokens greedy tokens among the first n_vocab (a char vocabulary's padded end-of-text is left
    out); the window is re-primed with its newest half when it is full, as model.generate does."""
    import numpy as np
    block_size = context_length(llm)
    ids, start, prime = list(ids), 0, True
    for _ in range(max_new_tokens):
        if len(ids) - start > block_size:
            start, prime = len(ids) - max(1, block_size // 2), True
        if prime:
            llm.reset()
            llm.eval(ids[start:])
            prime = False
        else:
            llm.eval(ids[-1:])
        ids.append(int(np.argmax(llm.scores[llm.n_tokens - 1][:n_vocab])))
    return ids


def model_vocab(llm):
    """The model's own tokens, as the export wrote them (a char vocabulary's file appends end-of-text, which the
    model never predicts); all of the file's for a GGUF from elsewhere."""
    from tools.llamacpp.export import MODEL_VOCAB_KEY
    return int(llm.metadata.get(MODEL_VOCAB_KEY, llm.n_vocab()))


def run(cfg):
    from checkpoint import check_num_threads
    check_num_threads(cfg["num_threads"])
    if not isinstance(cfg["max_new_tokens"], int) or cfg["max_new_tokens"] < 1:
        raise UserError(f"--max_new_tokens must be a positive integer, got {cfg['max_new_tokens']!r} "
                        f"(fix: e.g. --max_new_tokens=200)")
    if not os.path.isfile(cfg["gguf"]):
        raise UserError(f"no file {cfg['gguf']} (fix: write one with python -m tools.llamacpp.export)")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        raise UserError("llama_cpp is not installed (fix: pip install llama-cpp-python; it builds llama.cpp from "
                        "source, ~20 minutes on 2 cores)") from None
    try:
        llm = load(cfg["gguf"], cfg["num_threads"] or os.cpu_count())
    except ValueError as e:   # llama_cpp's answer to a file llama.cpp cannot load
        raise UserError(f"llama.cpp cannot load {cfg['gguf']} ({e}) (fix: write it with python -m "
                        f"tools.llamacpp.export)") from None
    ids = llm.tokenize(cfg["start"].encode("utf-8"), add_bos=False, special=False)
    if not ids:
        raise UserError("--start is empty (fix: give at least one character)")
    t0 = time.perf_counter()
    out = greedy(llm, ids, cfg["max_new_tokens"], model_vocab(llm))
    dt = time.perf_counter() - t0
    print(cfg["start"] + llm.detokenize(out[len(ids):]).decode("utf-8", errors="replace"))
    print(f"{cfg['max_new_tokens']} tokens in {dt:.2f}s ({cfg['max_new_tokens'] / max(dt, 1e-9):.1f} tokens/s)",
          file=sys.stderr)


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
