"""
Sample text from a trained checkpoint.

    python sample.py                            # the checkpoint train.py just wrote
    python sample.py --out_dir=out-shakespeare-char
    python sample.py --out_dir=out --start="ROMEO:" --num_samples=3 --max_new_tokens=200
    python sample.py --start=FILE:prompt.txt --temperature=0.7 --top_k=50 --seed=42
    python sample.py --no_kv_cache              # plain path: re-run the whole window every token
    python sample.py --keep_heaviest_branch     # pgpt: run only the branch with the largest weight
    python -m tools.fast_sample                 # the same with a compiled decode step (for long runs)
    python -m tools.huggingface.sample --init_from=DIR   # a Hugging Face model instead

Loads out_dir/ckpt.pt (the best validation loss; falls back to last.pt) or the .pt file given as
--out_dir, encodes --start with the tokenizer of the dataset the model was trained on, and prints
--num_samples samples, each beginning with the start text, separated by '---------------'.
The samples go to stdout; one line about what was loaded goes to stderr. More: docs/sampling_and_eval.md.
"""

import functools
import gc
import os
import sys
import time

import torch

from checkpoint import (autocast, busy_machine, check_num_threads, check_seed, keep_heaviest_branch, load_model,
                        resolve_device, resolve_dtype)
from configurator import UserError, check_temperature, run_command
from dataset import encode_start, load_tokenizer, read_start, render, resolve_data_dir

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the out*/ folder
                            # with the newest checkpoint (the run train.py just finished)
    data_dir="",            # dataset folder with meta.json; "" = the one recorded in the checkpoint
    start="\n",             # prompt text, or FILE:path to read it from a file
    num_samples=10,
    max_new_tokens=500,
    temperature=0.8,        # 0 = greedy (argmax); < 1 sharper, > 1 more random
    top_k=200,              # sample among the k most likely tokens; 0 = the whole vocabulary
    seed=1337,
    device="auto",          # auto = cuda > mps > cpu
    dtype="auto",           # auto = bfloat16 on cuda if supported (else float16), float32 elsewhere
    num_threads=0,          # CPU threads for torch; 0 = torch's default. 1 when other jobs share the cores
    no_kv_cache=False,      # True: the plain path that re-runs the whole window for every token
    keep_heaviest_branch=False,  # pgpt: run only the heaviest branch (paper 004's inference)
)

# Boolean keys that may be given as a bare flag (`--no_kv_cache` means `--no_kv_cache=True`).
BOOL_FLAGS = ("no_kv_cache", "keep_heaviest_branch")
SEPARATOR = "---------------"


def check_options(cfg):
    """The sampling options, before anything is loaded; returns the device and the start text."""
    if cfg["num_samples"] < 1 or cfg["max_new_tokens"] < 0:
        raise UserError("--num_samples must be >= 1 and --max_new_tokens >= 0 (fix: e.g. --num_samples=1)")
    if cfg["temperature"] < 0 or cfg["top_k"] < 0:
        raise UserError("--temperature and --top_k must be >= 0 (fix: 0 means greedy / no top-k)")
    check_temperature(cfg["temperature"])
    check_seed(cfg["seed"])
    check_num_threads(cfg["num_threads"])
    if cfg["num_threads"] > 0:
        torch.set_num_threads(cfg["num_threads"])
    return str(resolve_device(cfg["device"])), read_start(cfg["start"])  # a bad prompt file fails before loading


def main(argv=None):
    return run_command(run, DEFAULTS, argv, BOOL_FLAGS)


def run(cfg, generate=None):
    """Load the checkpoint and its dataset's tokenizer, then write_samples. generate: see write_samples."""
    device, start_text = check_options(cfg)
    model, ckpt = load_model(cfg["out_dir"], device)
    data_dir = resolve_data_dir(ckpt, cfg["data_dir"])
    dataset = ckpt.get("dataset") or os.path.basename(os.path.normpath(data_dir))
    write_samples(model, load_tokenizer(data_dir), start_text, cfg, device,
                  f"{ckpt['path']} (iter {ckpt.get('iter_num', '?')}", dataset, generate)


def write_samples(model, tok, start_text, cfg, device, source, dataset, generate=None):
    """Print cfg["num_samples"] samples of `model` after start_text (tools/huggingface/sample.py calls it too).
    generate(model, idx, ...) replaces model.generate (tools/fast_sample.py: its compiled decode step)."""
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    start_ids = encode_start(tok, start_text, dataset, model.config.vocab_size)
    notes = [keep_heaviest_branch(model, cfg["keep_heaviest_branch"]), busy_machine(device)]
    use_cache = not cfg["no_kv_cache"]
    params = model.get_num_params(non_embedding=False)
    info = (f"sampling from {source}, {params / 1e6:.2f}M params) on {device}, "
            f"{str(dtype).replace('torch.', '')}, KV cache {'on' if use_cache else 'off'}")
    print("; ".join([info] + [n for n in notes if n]), file=sys.stderr)

    torch.manual_seed(cfg["seed"])
    generator = torch.Generator(device=device).manual_seed(cfg["seed"])
    x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, :]
    top_k = cfg["top_k"] or None
    generate = model.generate if generate is None else functools.partial(generate, model)
    t0, n_new = time.perf_counter(), 0
    with torch.no_grad(), autocast(device, dtype):
        for _ in range(cfg["num_samples"]):
            y = generate(x, cfg["max_new_tokens"], temperature=cfg["temperature"], top_k=top_k,
                         use_kv_cache=use_cache, generator=generator)
            n_new += y.size(1) - x.size(1)
            print(render(tok, start_text, start_ids, y[0].tolist()))
            print(SEPARATOR, flush=True)
    dt = time.perf_counter() - t0
    print(f"{n_new} tokens in {dt:.2f}s ({n_new / max(dt, 1e-9):.1f} tokens/s)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
    # everything is written and closed: spare the exit its garbage collection over all of torch's objects, which
    # takes most of a second (results/README.md, "The whole process against nanoGPT")
    gc.freeze()
