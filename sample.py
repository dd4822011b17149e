"""
Sample text from a trained checkpoint.

    python sample.py                            # the checkpoint train.py just wrote
    python sample.py --out_dir=out-shakespeare-char
    python sample.py --out_dir=out --start="ROMEO:" --num_samples=3 --max_new_tokens=200
    python sample.py --start=FILE:prompt.txt --temperature=0.7 --top_k=50 --seed=42
    python sample.py --no_kv_cache              # plain path: re-run the whole window every token
    python sample.py --keep_heaviest_branch     # pgpt: run only the branch with the largest weight
    python sample.py --init_from=gpt2           # a Hugging Face model (directory or hub name), see huggingface/
    python sample.py --compile                  # compiled decode step over a static KV cache (for long runs)

Loads out_dir/ckpt.pt (the best validation loss; falls back to last.pt) or the .pt file given as
--out_dir, encodes --start with the tokenizer of the dataset the model was trained on, and prints
--num_samples samples, each beginning with the start text, separated by '---------------'.
The samples go to stdout; one line about what was loaded goes to stderr.

With the same --seed the KV-cache path and --no_kv_cache print the same text: model.generate feeds
both paths the same window and they draw from the same seeded torch.Generator.
"""

import os
import sys
import time

import torch

from configurator import MAX_SEED, UserError, autocast, resolve_device, resolve_dtype, run_command
from huggingface.convert import load_pretrained
from huggingface.tokenizer import tokenizer_for
from runfiles.checkpoint import keep_heaviest_branch, load_model
from runfiles.dataset import resolve_data_dir
from runfiles.tokenizer import encode_start, load_tokenizer, render

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the out*/ folder
                            # with the newest checkpoint (the run train.py just finished)
    init_from="",           # a Hugging Face GPT-2 / Llama / MobileLLM directory or hub name instead of out_dir
    data_dir="",            # dataset folder with meta.json; "" = the one recorded in the checkpoint
                            # (with init_from: "" = the model's own tokenizer)
    start="\n",             # prompt text, or FILE:path to read it from a file
    num_samples=10,
    max_new_tokens=500,
    temperature=0.8,        # 0 = greedy (argmax); < 1 sharper, > 1 more random
    top_k=200,              # sample among the k most likely tokens; 0 = the whole vocabulary
    seed=1337,
    device="auto",          # auto = cuda > mps > cpu
    dtype="auto",           # auto = bfloat16 on cuda if supported (else float16), float32 elsewhere
    no_kv_cache=False,      # True: the plain path that re-runs the whole window for every token
    keep_heaviest_branch=False,  # pgpt: run only the heaviest branch (paper 004's inference)
    compile=False,          # compiled single-token step over a static KV cache (gpt-fast style: CUDA graphs on a
                            # GPU, inductor's C++ wrapper on a CPU); compiling takes ~20 s to a minute, so it pays
                            # off on long runs only (Deep Thinking: ignored)
)

# Boolean keys that may be given as a bare flag (`--no_kv_cache` means `--no_kv_cache=True`).
BOOL_FLAGS = ("no_kv_cache", "keep_heaviest_branch", "compile")
SEPARATOR = "---------------"
MIN_TEMPERATURE = 1e-6   # float32 logits / 1e-6 stay finite (|logit| < 1e32); float32 rounds 1e-300 itself to 0


def read_start(start):
    if start.startswith("FILE:"):
        path = start[len("FILE:"):]
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read the start file '{path}': {e.strerror if isinstance(e, OSError) else e} "
                            f"(fix: --start=FILE:path must name a readable utf-8 text file)") from None
    return start


def main(argv=None):
    return run_command(run, DEFAULTS, argv, BOOL_FLAGS)


def run(cfg):
    if cfg["num_samples"] < 1 or cfg["max_new_tokens"] < 0:
        raise UserError("--num_samples must be >= 1 and --max_new_tokens >= 0 (fix: e.g. --num_samples=1)")
    if cfg["temperature"] < 0 or cfg["top_k"] < 0:
        raise UserError("--temperature and --top_k must be >= 0 (fix: 0 means greedy / no top-k)")
    if 0 < cfg["temperature"] < MIN_TEMPERATURE:   # logits / temperature would overflow to inf: NaN probabilities
        raise UserError(f"--temperature={cfg['temperature']:g} is too small to divide the logits by (fix: "
                        f"--temperature=0 for greedy decoding, or {MIN_TEMPERATURE:g} or more)")
    if not 0 <= cfg["seed"] < MAX_SEED:
        raise UserError(f"--seed must be an integer in [0, {MAX_SEED - 1}], got {cfg['seed']} (fix: --seed=1337)")
    device = str(resolve_device(cfg["device"]))
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    start_text = read_start(cfg["start"])  # before loading: a bad prompt file fails fast

    if cfg["init_from"]:
        model, info = load_pretrained(cfg["init_from"], device)
        ckpt = {"path": info["source"], "iter_num": "pretrained"}
        tok = load_tokenizer(cfg["data_dir"]) if cfg["data_dir"] else tokenizer_for(info)
        dataset = cfg["data_dir"] or f"{info['source']}'s tokenizer"
    else:
        model, ckpt = load_model(cfg["out_dir"], device)
        data_dir = resolve_data_dir(ckpt, cfg["data_dir"])
        tok = load_tokenizer(data_dir)
        dataset = ckpt.get("dataset") or os.path.basename(os.path.normpath(data_dir))
    start_ids = encode_start(tok, start_text, dataset)
    if max(start_ids) >= model.config.vocab_size:
        raise UserError(f"the prompt encodes to token id {max(start_ids)}, beyond the model's vocabulary of "
                        f"{model.config.vocab_size} (fix: use the tokenizer the model was trained with)")

    note = keep_heaviest_branch(model, cfg["keep_heaviest_branch"])
    use_cache = not cfg["no_kv_cache"]
    compile_step = cfg["compile"] and use_cache and not model.config.think_steps
    if cfg["compile"] and not compile_step:
        note = "; ".join(filter(None, [note, "--compile ignored (it compiles the cached decode step; "
                                             "Deep Thinking and --no_kv_cache decode without it)"]))
    params = model.get_num_params(non_embedding=False)
    info = (f"sampling from {ckpt['path']} (iter {ckpt.get('iter_num', '?')}, {params / 1e6:.2f}M params) on "
            f"{device}, {str(dtype).replace('torch.', '')}, KV cache {'on' if use_cache else 'off'}")
    print(info + (f"; {note}" if note else ""), file=sys.stderr)

    torch.manual_seed(cfg["seed"])
    generator = torch.Generator(device=device).manual_seed(cfg["seed"])
    x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, :]
    top_k = cfg["top_k"] or None
    t0, n_new = time.perf_counter(), 0
    with torch.no_grad(), autocast(device, dtype):
        for _ in range(cfg["num_samples"]):
            y = model.generate(x, cfg["max_new_tokens"], temperature=cfg["temperature"], top_k=top_k,
                               use_kv_cache=use_cache, generator=generator, compile=compile_step)
            n_new += y.size(1) - x.size(1)
            print(render(tok, start_text, start_ids, y[0].tolist()))
            print(SEPARATOR, flush=True)
    dt = time.perf_counter() - t0
    print(f"{n_new} tokens in {dt:.2f}s ({n_new / max(dt, 1e-9):.1f} tokens/s)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
