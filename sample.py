"""
Sample text from a trained checkpoint.

    python sample.py                          # the newest out*/: its ckpt.pt, else last.pt
    python sample.py --out_dir=out --start="ROMEO:" --num_samples=3
    python sample.py --start=FILE:prompt.txt --temperature=0.7 --top_k=50
    python sample.py --no_kv_cache            # re-run the whole window every token
    python sample.py --keep_heaviest_branch   # pgpt: only the heaviest branch
    python -m tools.fast_sample               # a compiled decode step (long runs)

As nanoGPT's sample.py: load the checkpoint (out_dir/ckpt.pt, else last.pt),
build the model, encode --start, generate, decode. Samples go to stdout as they
are generated; what was loaded goes to stderr. More: docs/sampling_and_eval.md.
"""

import codecs
import functools
import gc
import sys
import time
from contextlib import nullcontext

import torch

from model import GPT, GPTConfig
from safety_net.checkpoint import load_checkpoint
from safety_net.configurator import run_command
from safety_net.dataset import tokenizer_of
from safety_net.sampling import setup_sampling

DEFAULTS = dict(
    # a checkpoint's folder or file; "" = the out*/ folder with the newest checkpoint
    out_dir="",
    data_dir="",            # meta.json's folder; "" = the one the checkpoint recorded
    start="\n",             # prompt text, or FILE:path to read it from a file
    num_samples=10,
    max_new_tokens=500,
    temperature=0.8,        # 0 = greedy (argmax); < 1 sharper, > 1 more random
    top_k=200,              # sample among the k most likely tokens; 0 = all
    seed=1337,
    device="auto",          # auto = cuda > mps > cpu
    dtype="auto",           # auto = bfloat16 (else float16) on cuda, float32 elsewhere
    num_threads=0,          # CPU threads; 0 = torch's default
    no_kv_cache=False,      # True: re-run the whole window for every token
    keep_heaviest_branch=False,  # pgpt: only the heaviest branch (paper 004)
)

SEPARATOR = "---------------"


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


def run(cfg):
    """Load the checkpoint, its model and its dataset's tokenizer, then write_samples."""
    # the options and --start's text, checked before loading; notes: a line when
    # other jobs keep the CPUs busy
    device, dtype, start_text, notes = setup_sampling(cfg)
    # a dict, its file in ckpt["path"]; ours or nanoGPT's; runs no code; one line for
    # non-finite weights or ones that do not fit
    ckpt = load_checkpoint(cfg["out_dir"], device)
    model = GPT(GPTConfig(**ckpt["model_args"]))
    model.load_state_dict(ckpt["model"])
    model.to(device).eval()
    # its dataset's tokenizer (meta.json, or nanoGPT's meta.pkl); the prompt's ids,
    # checked against it
    tok, start_ids = tokenizer_of(ckpt, cfg["data_dir"], start_text)
    source = f"{ckpt['path']} (iter {ckpt.get('iter_num', '?')})"
    write_samples(model, tok, start_text, start_ids, cfg, device, dtype, source,
                  GPT.generate, notes)


def print_token(tok, utf8, token):
    """Print a token's text as it comes: tok.token_bytes(token) is its bytes (a BPE
    token may end inside a character); utf8 holds a character back until it is whole."""
    print(utf8.decode(tok.token_bytes(int(token))), end="", flush=True)


def write_samples(model, tok, start_text, start_ids, cfg, device, dtype, source,
                  generate, notes=()):
    """Print cfg["num_samples"] samples of `model` after start_text. generate:
    GPT.generate, or tools/fast_sample.py's; notes: setup_sampling's."""
    notes = list(notes)
    if cfg["keep_heaviest_branch"]:
        notes.append(model.keep_heaviest_branch())
    use_cache = not cfg["no_kv_cache"]
    params = model.get_num_params(non_embedding=False) / 1e6
    dtype_name = str(dtype).replace("torch.", "")
    info = f"sampling from {source}, {params:.2f}M params on {device}, {dtype_name}"
    info += f", KV cache {'on' if use_cache else 'off'}"
    print("; ".join([info] + notes), file=sys.stderr)

    # every draw takes this generator: the one source of randomness
    generator = torch.Generator(device=device).manual_seed(cfg["seed"])
    ctx = nullcontext()
    if dtype != torch.float32:
        ctx = torch.autocast(device_type=device.type, dtype=dtype)
    x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, :]
    top_k = cfg["top_k"] or None
    t0 = time.perf_counter()
    n_new = 0
    with torch.no_grad(), ctx:
        for _ in range(cfg["num_samples"]):
            print(start_text, end="", flush=True)
            utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
            on_token = functools.partial(print_token, tok, utf8)
            y = generate(model, x, cfg["max_new_tokens"], cfg["temperature"], top_k,
                         use_kv_cache=use_cache, generator=generator,
                         on_token=on_token, n_tokens=tok.vocab_size)
            print(utf8.decode(b"", final=True))   # a character cut short: U+FFFD
            print(SEPARATOR, flush=True)
            n_new += y.size(1) - x.size(1)
    dt = time.perf_counter() - t0
    speed = n_new / max(dt, 1e-9)
    print(f"{n_new} tokens in {dt:.2f}s ({speed:.1f} tokens/s)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
    gc.freeze()   # all is written: spare the exit a garbage collection (results/)
