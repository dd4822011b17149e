"""
Sample text from a trained checkpoint.

    python sample.py                            # the checkpoint train.py just wrote
    python sample.py --out_dir=out-shakespeare-char
    python sample.py --out_dir=out --start="ROMEO:" --num_samples=3 --max_new_tokens=200
    python sample.py --start=FILE:prompt.txt --temperature=0.7 --top_k=50 --seed=42
    python sample.py --no_kv_cache              # plain path: re-run the whole window every token
    python sample.py --keep_heaviest_branch     # pgpt: run only the branch with the largest weight
    python sample.py --compile                  # GPU: compiled decode step over a static KV cache (CUDA graphs)

Loads out_dir/ckpt.pt (the best validation loss; falls back to last.pt) or the .pt file given as
--out_dir, encodes --start with the tokenizer of the dataset the model was trained on, and prints
--num_samples samples, each beginning with the start text, separated by '---------------'.
The samples go to stdout; one line about what was loaded goes to stderr.

With the same --seed the KV-cache path and --no_kv_cache print the same text: model.generate feeds
both paths the same window and they draw from the same seeded torch.Generator.
"""

import contextlib
import os
import sys
import time

import torch

from configurator import ConfigError, load_config

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
    no_kv_cache=False,      # True: the plain path that re-runs the whole window for every token
    keep_heaviest_branch=False,  # pgpt: run only the heaviest branch (paper 004's inference)
    compile=False,          # compiled single-token step over a static KV cache (gpt-fast style, CUDA graphs on a
                            # GPU); compiling costs a minute or more, so for long GPU runs (Deep Thinking: ignored)
)

# Boolean keys that may be given as a bare flag (`--no_kv_cache` means `--no_kv_cache=True`).
BOOL_FLAGS = ("no_kv_cache", "keep_heaviest_branch", "compile")
SEPARATOR = "---------------"


# --- helpers shared with eval.py and bench.py ---------------------------------------------------

def expand_bool_flags(argv, flags):
    """Turn a bare `--flag` into `--flag=True` for the given boolean keys.

    configurator reads `--key value` pairs, so a bare `--no_kv_cache` would swallow the next argument
    (or fail when it is the last one). `--flag True|False|1|0` and `--flag=...` are left unchanged."""
    out = []
    for i, arg in enumerate(argv):
        key = arg[2:].replace("-", "_") if arg.startswith("--") else None
        if key in flags:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.lower() not in ("true", "false", "1", "0"):
                arg = f"--{key}=True"
        out.append(arg)
    return out


def parse_args(defaults, argv, bool_flags=()):
    """configurator.load_config with bare boolean flags; bad input -> one-line SystemExit."""
    try:
        config, _ = load_config(defaults, expand_bool_flags(list(argv), bool_flags))
    except ConfigError as e:
        raise SystemExit(f"error: {e}")
    return config


def pick_device(name):
    if name != "auto":
        return name
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(name, device):
    """torch dtype for autocast. float32 means no autocast."""
    if name == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in dtypes:
        raise SystemExit(f"error: unknown dtype '{name}' (fix: use auto, float32, bfloat16 or float16)")
    return dtypes[name]


def autocast_context(device, dtype):
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=dtype)


def load_checkpoint_model(out_dir, device):
    """(model, ckpt) via checkpoint.load_model, with one-line errors that say to train first.
    An empty out_dir means the out*/ folder with the newest checkpoint (the run train.py just wrote)."""
    from checkpoint import CheckpointError, latest_out_dir, load_model
    if not out_dir:
        out_dir = latest_out_dir()
        print(f"loading the newest checkpoint: {out_dir} (choose another with --out_dir)", file=sys.stderr)
    try:
        return load_model(out_dir, device)
    except CheckpointError as e:
        raise SystemExit(f"error: {e}")


def resolve_data_dir(ckpt, override=""):
    """The dataset folder: --data_dir, else the checkpoint's data_dir. A relative path recorded at
    training time is tried from the current directory, then from the repository root."""
    data_dir = override or ckpt.get("data_dir") or ""
    if not data_dir:
        raise SystemExit("error: the checkpoint records no data_dir (fix: pass --data_dir=data/<dataset>)")
    if os.path.isabs(data_dir) or os.path.isdir(data_dir):
        return data_dir
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), data_dir)
    return here if os.path.isdir(here) else data_dir


def load_dataset_tokenizer(data_dir):
    from prepare import load_tokenizer
    try:
        return load_tokenizer(data_dir)
    except (FileNotFoundError, ValueError, KeyError) as e:
        raise SystemExit(f"error: cannot load the tokenizer of '{data_dir}': {e} "
                         f"(fix: run prepare.py for that dataset, or pass --data_dir)")


def apply_keep_heaviest_branch(model, enabled):
    """pgpt: keep only the branch with the largest combination weight. Returns a note for the user."""
    if not enabled:
        return ""
    if model.config.n_branches == 1:
        return "keep_heaviest_branch ignored (the model has one branch)"
    model.keep_branch = model.heaviest_branch()
    weights = ", ".join(f"{w:.3f}" for w in model.branch_weights().tolist())
    return f"running only branch {model.keep_branch} of {model.config.n_branches} (weights {weights})"


# --- sample.py itself ---------------------------------------------------------------------------

def read_start(start):
    if start.startswith("FILE:"):
        path = start[len("FILE:"):]
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise SystemExit(f"error: cannot read the start file '{path}': {e.strerror if isinstance(e, OSError) else e} "
                             f"(fix: --start=FILE:path must name a readable utf-8 text file)")
    return start


def encode_start(tok, text, dataset):
    """Token ids of the prompt; characters the (char-level) vocabulary lacks are a one-line error."""
    known = getattr(tok, "stoi", None)
    if known is not None:
        unknown = sorted(set(text) - set(known))
        if unknown:
            listed = ", ".join(repr(ch) for ch in unknown)
            raise SystemExit(f"error: characters not in the vocabulary: {listed} "
                             f"(the model was trained on {dataset}; fix: remove them from --start)")
    try:
        ids = tok.encode(text)
    except (ValueError, KeyError) as e:
        raise SystemExit(f"error: cannot encode --start: {e} (the model was trained on {dataset})")
    if not ids:
        eot = getattr(tok, "eot_token", None)
        if eot is None:
            raise SystemExit("error: --start is empty (fix: give at least one character, e.g. --start=\"\\n\")")
        ids = [eot]  # an empty prompt means "start of a document" for BPE datasets
    return ids


def render(tok, start_text, start_ids, ids):
    """The sample as text, beginning with the start text exactly as given. Decoding all ids at once
    keeps multi-byte characters that straddle the prompt boundary whole (BPE); the decoded prompt is
    then swapped for the user's text (they differ only for an empty BPE prompt, which became eot)."""
    prompt = tok.decode(start_ids)
    text = tok.decode(ids)
    if text.startswith(prompt):
        return start_text + text[len(prompt):]
    return start_text + tok.decode(ids[len(start_ids):])


def main(argv):
    cfg = parse_args(DEFAULTS, argv, BOOL_FLAGS)
    if cfg["num_samples"] < 1 or cfg["max_new_tokens"] < 0:
        raise SystemExit("error: --num_samples must be >= 1 and --max_new_tokens >= 0")
    if cfg["temperature"] < 0 or cfg["top_k"] < 0:
        raise SystemExit("error: --temperature and --top_k must be >= 0 (fix: 0 means greedy / no top-k)")
    device = pick_device(cfg["device"])
    dtype = pick_dtype(cfg["dtype"], device)
    start_text = read_start(cfg["start"])  # before loading: a bad prompt file fails fast

    model, ckpt = load_checkpoint_model(cfg["out_dir"], device)
    data_dir = resolve_data_dir(ckpt, cfg["data_dir"])
    tok = load_dataset_tokenizer(data_dir)
    dataset = ckpt.get("dataset") or os.path.basename(os.path.normpath(data_dir))
    start_ids = encode_start(tok, start_text, dataset)

    note = apply_keep_heaviest_branch(model, cfg["keep_heaviest_branch"])
    use_cache = not cfg["no_kv_cache"]
    compile_step = cfg["compile"] and use_cache and not model.config.think_steps
    if cfg["compile"] and not compile_step:
        note = "; ".join(filter(None, [note, "--compile ignored (it compiles the cached decode step; "
                                             "Deep Thinking and --no_kv_cache decode without it)"]))
    info = (f"sampling from {ckpt['path']} (iter {ckpt.get('iter_num', '?')}, "
            f"{model.get_num_params() / 1e6:.2f}M params) on {device}, {str(dtype).replace('torch.', '')}, "
            f"KV cache {'on' if use_cache else 'off'}")
    print(info + (f"; {note}" if note else ""), file=sys.stderr)

    torch.manual_seed(cfg["seed"])
    generator = torch.Generator(device=device).manual_seed(cfg["seed"])
    x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, :]
    top_k = cfg["top_k"] or None
    t0, n_new = time.perf_counter(), 0
    with torch.no_grad(), autocast_context(device, dtype):
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
