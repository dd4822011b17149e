"""
Sample text from a trained checkpoint.

    python sample.py                            # the checkpoint train.py just wrote
    python sample.py --out_dir=out-shakespeare-char
    python sample.py --out_dir=out --start="ROMEO:" --num_samples=3 --max_new_tokens=200
    python sample.py --start=FILE:prompt.txt --temperature=0.7 --top_k=50 --seed=42
    python sample.py --no_kv_cache              # plain path: re-run the whole window every token
    python sample.py --keep_heaviest_branch     # pgpt: run only the branch with the largest weight
    python -m tools.fast_sample                 # the same with a compiled decode step (long runs)
    python -m tools.huggingface.sample --init_from=DIR   # a Hugging Face model instead

As nanoGPT's sample.py: load the checkpoint (out_dir/ckpt.pt, the best validation loss, else
last.pt; or the .pt file given as --out_dir), build GPTConfig -> GPT from its model_args and load
its weights; encode --start with the tokenizer of the dataset the model was trained on; generate;
decode. The --num_samples samples go to stdout, each beginning with the start text, separated by
'---------------'; one line about what was loaded goes to stderr. More: docs/sampling_and_eval.md.
"""

import gc
import sys
import time
from contextlib import nullcontext

import torch

from checkpoint import load_checkpoint, load_weights, setup_sampling
from configurator import UserError, run_command
from dataset import encode_start, render, tokenizer_of
from model import GPT, GPTConfig

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the out*/
                            # folder with the newest checkpoint (the run train.py just finished)
    data_dir="",            # dataset folder with meta.json; "" = the one recorded in the checkpoint
    start="\n",             # prompt text, or FILE:path to read it from a file
    num_samples=10,
    max_new_tokens=500,
    temperature=0.8,        # 0 = greedy (argmax); < 1 sharper, > 1 more random
    top_k=200,              # sample among the k most likely tokens; 0 = the whole vocabulary
    seed=1337,
    device="auto",          # auto = cuda > mps > cpu
    dtype="auto",           # auto = bfloat16 on cuda if supported (else float16), float32 elsewhere
    num_threads=0,          # CPU threads for torch; 0 = torch's default. 1 when others share CPUs
    no_kv_cache=False,      # True: the plain path that re-runs the whole window for every token
    keep_heaviest_branch=False,  # pgpt: run only the heaviest branch (paper 004's inference)
)

# Boolean keys that may be given as a bare flag (`--no_kv_cache` means `--no_kv_cache=True`).
BOOL_FLAGS = ("no_kv_cache", "keep_heaviest_branch")
SEPARATOR = "---------------"


def main(argv=None):
    return run_command(run, DEFAULTS, argv, BOOL_FLAGS)


def check_options(cfg):
    """The sampling options, before anything is loaded (one-line errors): (device, dtype)."""
    if cfg["num_samples"] < 1 or cfg["max_new_tokens"] < 0:
        raise UserError("--num_samples must be >= 1 and --max_new_tokens >= 0 "
                        "(fix: e.g. --num_samples=1)")
    if cfg["top_k"] < 0:
        raise UserError("--top_k must be >= 0 (fix: 0 means no top-k)")
    return setup_sampling(cfg)   # --temperature, --seed, --num_threads, --device, --dtype


def read_start(start):
    """The prompt of --start: the text itself, or the contents of the file named by FILE:path."""
    if not start.startswith("FILE:"):
        return start
    path = start[len("FILE:"):]
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else e
        raise UserError(f"cannot read the start file '{path}': {reason} "
                        f"(fix: --start=FILE:path must name a readable utf-8 text file)") from None


def run(cfg, generate=GPT.generate):
    """Load the checkpoint, its model and its dataset's tokenizer, then write_samples. generate: see
    write_samples."""
    device, dtype = check_options(cfg)
    start_text = read_start(cfg["start"])   # a bad prompt file fails before anything is loaded
    # the checkpoint: tensors and plain values only (loading runs no code); nanoGPT's too; its
    # model_args checked against this model.py (one line if they do not fit)
    ckpt = load_checkpoint(cfg["out_dir"], device)
    config = GPTConfig(**ckpt["model_args"])
    model = GPT(config)
    load_weights(model, ckpt)   # one-line errors for non-finite weights or ones that do not fit
    model.to(device).eval()
    tok, dataset = tokenizer_of(ckpt, cfg["data_dir"])   # meta.json, or nanoGPT's meta.pkl
    source = f"{ckpt['path']} (iter {ckpt.get('iter_num', '?')}"
    write_samples(model, tok, start_text, cfg, device, dtype, source, dataset, generate)


def write_samples(model, tok, start_text, cfg, device, dtype, source, dataset,
                  generate=GPT.generate):
    """Print cfg["num_samples"] samples of `model` after start_text (tools/huggingface/sample.py
    calls it too). generate(model, idx, ...): GPT.generate, or tools/fast_sample.py's (a compiled
    decode step)."""
    start_ids = encode_start(tok, start_text, dataset, model.config.vocab_size)   # one-line errors
    notes = []
    if cfg["keep_heaviest_branch"]:
        notes.append(model.keep_heaviest_branch())
    use_cache = not cfg["no_kv_cache"]
    params = model.get_num_params(non_embedding=False)
    info = (f"sampling from {source}, {params / 1e6:.2f}M params) on {device}, "
            f"{str(dtype).replace('torch.', '')}, KV cache {'on' if use_cache else 'off'}")
    print("; ".join([info] + notes), file=sys.stderr)

    torch.manual_seed(cfg["seed"])
    generator = torch.Generator(device=device).manual_seed(cfg["seed"])
    device_type = str(device).split(":")[0]
    ctx = nullcontext()
    if dtype != torch.float32:
        ctx = torch.autocast(device_type=device_type, dtype=dtype)
    x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, :]
    top_k = cfg["top_k"] or None
    t0 = time.perf_counter()
    n_new = 0
    with torch.no_grad(), ctx:
        for _ in range(cfg["num_samples"]):
            y = generate(model, x, cfg["max_new_tokens"], cfg["temperature"], top_k,
                         use_kv_cache=use_cache, generator=generator)
            n_new += y.size(1) - x.size(1)
            # decode: the ids as text, beginning with the start text exactly as given
            print(render(tok, start_text, start_ids, y[0].tolist()))
            print(SEPARATOR, flush=True)
    dt = time.perf_counter() - t0
    print(f"{n_new} tokens in {dt:.2f}s ({n_new / max(dt, 1e-9):.1f} tokens/s)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
    # everything is written and closed: spare the exit its garbage collection over all of torch's
    # objects, which takes most of a second (results/README.md, "The whole process against nanoGPT")
    gc.freeze()
