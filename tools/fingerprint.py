"""
A refactor's proof that nothing changed: fingerprints of what the code computes, for every preset family, that hold
on any CPU.

    python -m tools.fingerprint > now.json                       # write the fingerprints
    python -m tools.fingerprint --check=results/fingerprint.json  # compare with the committed ones (exit 1: one differs)

Per preset (variants/*.py, shrunk where the preset is large, see SMALL):
  exact (sha256): the greedy and the sampled tokens of model.generate with and without the KV cache; for the four
    CPU recipes of paper 004, the losses (as log.csv writes them, 6 digits) of a 6-iteration train.py run.
  bit-identical, or else within a float tolerance (RTOL, of the tensor's RMS): the initial weights (seed 0), the
    logits of a fixed batch (every position) at those weights, and the logits with every weight re-drawn at std 0.3
    (attention far from uniform, so that a one-token leak moves them). Each is kept as a sha256 and as PROJECTIONS
    fixed random projections. Float32 results are not bit-identical across CPUs: kernels sum in another order on
    another instruction set. Measured on one machine by switching kernels (ATEN_CPU_CAPABILITY=default,
    MKL_CBWR=COMPATIBLE): logits move by at most 8.3e-6 of their RMS, initial weights by 1.1e-7 (torch's scalar
    normal_ path); tokens and losses did not move.
Needs the prepared data/shakespeare_char (train.py prepares it on first use).
"""
import csv
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from model import GPT, GPTConfig
import variants
from safety_net.configurator import UserError, run_command
from safety_net.fileio import check_not_a_folder

# the large presets at a width and depth that build in a second, keeping every flag they switch on
SMALL = dict(baseline=dict(n_layer=2, n_embd=64, n_head=4, mlp_hidden=128, vocab_size=97, block_size=32),
             layer_sharing=dict(n_layer=4, n_embd=48, n_head=6, n_kv_head=2, mlp_hidden=96, vocab_size=97,
                                block_size=32),
             enhanced_residual=dict(n_layer=4, n_embd=48, n_head=6, n_kv_head=2, mlp_hidden=96, vocab_size=97,
                                    block_size=32),
             deep_thinking=dict(n_layer=4, n_embd=48, n_head=6, n_kv_head=2, mlp_hidden=96, vocab_size=97,
                                block_size=32),
             mobilellm_125m=dict(n_layer=4, n_embd=48, n_head=6, n_kv_head=2, mlp_hidden=96, vocab_size=97,
                                 block_size=32),
             mobilellm_600m=dict(n_layer=4, n_embd=48, n_head=6, n_kv_head=2, mlp_hidden=96, vocab_size=97,
                                 block_size=32),
             shishulm_125=dict(n_layer=6, n_embd=48, n_head=6, n_kv_head=2, mlp_hidden=96, vocab_size=97,
                               block_size=32, n_attn_layers=2, share_from_layer=2),
             shishulm_600=dict(n_layer=6, n_embd=48, n_head=6, n_kv_head=2, mlp_hidden=96, vocab_size=97,
                               block_size=32, n_attn_layers=2, share_from_layer=2),
             efficio=dict(n_layer=4, n_embd=64, n_head=4, vocab_size=97, block_size=32, share_group_size=2),
             gpt=dict(block_size=32), pgpt=dict(block_size=32), lgpt=dict(block_size=32), cgpt=dict(block_size=32))
RUNS = ("gpt", "pgpt", "lgpt", "cgpt")   # config/<name>_shakespeare_cpu.py
PROJECTIONS = 8
# of the RMS; about 10x the largest kernel-to-kernel difference measured (docstring)
RTOL = {"weights": 1e-6, "logits": 1e-4, "logits_std0.3": 1e-4}


def digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def floats(*tensors):
    """The sha256 of the tensors and PROJECTIONS numbers that move with any change of them: their RMS and their dot
    products with fixed random directions (numpy's PCG64: the same on every machine), scaled so that a change of RMS
    r moves each projection by about r."""
    x = torch.cat([t.detach().flatten() for t in tensors]).double().numpy()
    directions = np.random.default_rng(0).standard_normal((PROJECTIONS, x.size)) / np.sqrt(x.size)
    return {"sha256": digest(*tensors), "rms": float(np.sqrt(np.mean(x * x))),
            "projections": [float(v) for v in directions @ x]}


def visible(model):
    """Every weight re-drawn at std 0.3 (numpy's generator: identical on every CPU)."""
    rng = np.random.default_rng(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(np.asarray(rng.standard_normal(tuple(p.shape)) * 0.3, dtype=np.float32)))
    return model


def model_prints(name):
    cfg = {**variants.load(name), **SMALL.get(name, {})}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg)).eval()
    out = {"weights": floats(*model.state_dict().values())}
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(cfg["vocab_size"], (2, 24), generator=gen)
    with torch.no_grad():
        out["logits"] = floats(model(idx, all_logits=True)[0])
    prompt = idx[:1, :5]
    for cache in (True, False):
        greedy = model.generate(prompt, 40, temperature=0, use_kv_cache=cache)   # past block_size: re-primes
        sampled = model.generate(prompt, 40, temperature=0.9, top_k=20, use_kv_cache=cache,
                                 generator=torch.Generator().manual_seed(2))
        out[f"tokens_kv{int(cache)}"] = digest(greedy, sampled)
    with torch.no_grad():
        out["logits_std0.3"] = floats(visible(model)(idx, all_logits=True)[0])
    return out


def compare(key, want, got):
    """'exact' (bit-identical), 'close' (floats within RTOL[key] of their RMS) or 'differ'."""
    if want == got:
        return "exact"
    if isinstance(want, dict) and isinstance(got, dict) and key in RTOL and want.keys() == got.keys():
        bound = RTOL[key] * want["rms"]
        pairs = [(want["rms"], got["rms"])] + list(zip(want["projections"], got["projections"]))
        if len(want["projections"]) == len(got["projections"]) and all(abs(a - b) <= bound for a, b in pairs):
            return "close"
    return "differ"


def run_prints(name, tmp):
    out_dir = os.path.join(tmp, name)
    cmd = [sys.executable, "train.py", f"config/{name}_shakespeare_cpu.py", "--max_iters=6", "--eval_interval=3",
           "--eval_iters=2", "--log_interval=1", f"--out_dir={out_dir}", "--device=cpu", "--num_threads=1"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    with open(os.path.join(out_dir, "log.csv"), newline="") as f:
        rows = [(r["iter"], r["kind"], r["loss"], r["val_loss"]) for r in csv.DictReader(f)]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


DEFAULTS = dict(check="")   # a fingerprints file to compare with; "" = print the fingerprints as JSON


def read_fingerprints(path):
    """The fingerprints a file written by this command holds; one line for any other file."""
    try:
        with open(path, encoding="utf-8") as f:
            want = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError):
        want = None
    if not isinstance(want, dict) or not all(isinstance(v, dict) for v in want.values()):
        raise UserError(f"--check={path} is not a file of fingerprints (fix: write one with python -m "
                        f"tools.fingerprint > FILE, e.g. results/fingerprint.json)")
    return want


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


def run(config):
    check = config["check"]
    if check:
        check_not_a_folder(check, "fingerprint.json", key="check")   # it said "no such file" (a hunt)
    if check and not os.path.isfile(check):
        raise UserError(f"--check={check}: no such file (fix: write one first with python -m tools.fingerprint "
                        f"> {check})")
    want = read_fingerprints(check) if check else None   # before the work (a traceback after it; a hunt)
    torch.set_num_threads(1)
    prints = {name: model_prints(name) for name in variants.available()}
    with tempfile.TemporaryDirectory() as tmp:
        for name in RUNS:
            prints[name]["train_losses"] = run_prints(name, tmp)
    if not check:
        print(json.dumps(prints, indent=1, sort_keys=True))
        return 0
    result = {f"{n}.{k}": compare(k, want.get(n, {}).get(k), prints.get(n, {}).get(k))
              for n in sorted(set(want) | set(prints)) for k in sorted(set(want.get(n, {})) | set(prints.get(n, {})))}
    diff = [name for name, r in result.items() if r == "differ"]
    close = [name for name, r in result.items() if r == "close"]
    print(f"{len(result)} fingerprints, {len(diff)} differ" + (": " + ", ".join(diff) if diff else "") +
          f"; {len(result) - len(diff) - len(close)} bit-identical, {len(close)} within float tolerance (another "
          f"CPU's kernels)" + (": " + ", ".join(close) if close else ""))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
