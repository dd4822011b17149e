"""
Multiple-round training with data refining (paper 003, PanGu-pi Pro, 4.2).

    python train.py config/x.py --out_dir=out-round1                      # round 1
    python -m tools.pangu.refine --out_dir=out-round1 [--rate=0.5]              # -> out-round1/refine.npy
    python train.py config/x.py --out_dir=out-round2 --init_from=out-round1/ckpt.pt \\
        --data_segments=out-round1/refine.npy                             # round 2 on the refined data

The paper's data unit is a training batch; here it is a fixed segment of the train split:
    segment i = tokens [i*(T+1), (i+1)*(T+1)) of train.bin, T = the model's block_size,
so one segment is exactly one training window (x = its first T tokens, y = its last T). Then
    l_i = mean next-token loss of segment i under the round-1 model
    p_i = exp(l_i / tau) / sum_j exp(l_j / tau)          (softmax; the paper uses tau = 1)
and the next round uses N0 = round(r * N) of the N segments, drawn without replacement with probabilities
p (sampling rate r; the paper recommends two rounds with r = 50%). With --parts=P the segments are cut into
P contiguous parts and each part is normalised and sampled on its own, as the paper does for its eight parts.

refine.npy (next to the checkpoint) holds the sorted token offsets of the chosen segments (refine.json beside
it: the train split they index, which train.py checks); train.py's
--data_segments makes every training window start at one of them (uniformly; validation is unchanged).
A full pass over the refined data is N0 / batch_size iterations.
"""

import json
import math
import os
import shlex

import numpy as np
import torch
import torch.nn.functional as F

from safety_net.checkpoint import load_model
from safety_net.configurator import UserError, run_command
from safety_net.dataset import resolve_data_dir, split_path
from safety_net.dataset import segments_info_path, split_tokens
from safety_net.fileio import atomic_open, check_out_dir
from safety_net.runtime import check_num_threads, check_seed

DEFAULTS = dict(
    out_dir="",          # round-1 out_dir (its ckpt.pt, else last.pt) or a checkpoint file; "" = the out*/ folder
                         # with the newest checkpoint, as sample.py's (it was out/, whatever ran last; a hunt)
    rate=0.5,            # sampling rate r = N0 / N
    temperature=1.0,     # tau in p_i = softmax(l_i / tau); 1 = the paper
    parts=1,             # normalise and sample within this many contiguous parts of the train split
    batch_size=64,       # segments per forward pass while scoring
    data_dir="",         # '' = the checkpoint's dataset
    seed=1337,
    num_threads=0,
)
OUT_NAME = "refine.npy"
MIN_TEMPERATURE = 1e-6   # l / 1e-320 is inf; a tau that leaves too few p_i above 0 is refused in refine()


def segment_starts(n_tokens, seg_len):
    """Token offsets of the N = n_tokens // seg_len whole segments: segment i = [i*seg_len, (i+1)*seg_len)."""
    return np.arange(n_tokens // seg_len, dtype=np.int64) * seg_len


@torch.no_grad()
def segment_losses(model, data, starts, seg_len, batch_size=64):
    """l_i: mean next-token cross-entropy over segment i (its first seg_len-1 tokens predict the rest)."""
    model.eval()
    device = next(model.parameters()).device
    losses = np.empty(len(starts))
    for b in range(0, len(starts), batch_size):
        s = starts[b:b + batch_size]
        win = torch.from_numpy(np.asarray(data[s[:, None] + np.arange(seg_len)], dtype=np.int64)).to(device)
        logits, _ = model(win[:, :-1], all_logits=True)
        nll = F.cross_entropy(logits.flatten(0, 1).float(), win[:, 1:].flatten(), reduction="none")
        losses[b:b + len(s)] = nll.view(len(s), -1).mean(1).cpu().numpy()
    return losses


def sampling_probs(losses, temperature=1.0):
    """p_i = exp(l_i / tau) / sum_j exp(l_j / tau)   (paper 003, 4.2, with tau = 1)."""
    return torch.softmax(torch.as_tensor(np.asarray(losses), dtype=torch.float64) / temperature, dim=0)


def check_options(rate, temperature, parts, n_segments):
    """UserError for a sampling rate, temperature or number of parts that makes no sense."""
    if not 0 < rate <= 1:
        raise UserError(f"rate must be in (0, 1], got {rate} (fix: --rate=0.5)")
    # inf samples uniformly, as if refining were off, and a tiny tau overflows l / tau (NaN probabilities): refused
    if not MIN_TEMPERATURE <= temperature < math.inf:
        raise UserError(f"temperature must be a finite number >= {MIN_TEMPERATURE:g}, got {temperature} "
                         f"(fix: --temperature=1)")
    if not 1 <= parts <= n_segments:
        raise UserError(f"parts must be in [1, {n_segments}] (the number of segments), got {parts} (fix: --parts=1)")


def refine(losses, rate=0.5, temperature=1.0, parts=1, generator=None):
    """Indices (sorted) of the segments for the next round: N0 = round(rate * N) of the N segments (at least
    1), drawn without replacement with probabilities p_i; with parts > 1 every contiguous part gets its
    share of N0 and its own softmax."""
    losses = np.asarray(losses, dtype=np.float64)
    check_options(rate, temperature, parts, len(losses))
    n, total = len(losses), max(1, round(rate * len(losses)))
    chosen = []
    for idx in np.array_split(np.arange(n), parts):
        # cumulative rounding: the parts' shares add up to exactly `total`
        n0 = round(total * (idx[-1] + 1) / n) - round(total * idx[0] / n)
        if n0 == 0:
            continue
        p = sampling_probs(losses[idx], temperature)
        # a small tau underflows most p_i to 0, and multinomial filled the rest of n0 with the first such segments
        # in text order, without a word: the last part of the text, not the highest losses (a hunt)
        drawable = int((p > 0).sum())
        if drawable < n0:
            raise UserError(f"--temperature={temperature:g} leaves {drawable} segment(s) a probability above 0, "
                            f"fewer than the {n0} to draw (fix: a larger --temperature, e.g. 1)")
        pick = torch.multinomial(p, n0, replacement=False, generator=generator).numpy()
        chosen.append(idx[pick])
    return np.sort(np.concatenate(chosen))


def run(opts):
    """pangu.refine's command: score every segment with the checkpoint, write refine.npy. Returns its path."""
    if opts["batch_size"] < 1:
        raise UserError(f"batch_size must be >= 1, got {opts['batch_size']} (fix: --batch_size=64)")
    check_num_threads(opts["num_threads"])
    check_seed(opts["seed"])
    if opts["num_threads"] > 0:
        torch.set_num_threads(opts["num_threads"])
    model, ckpt = load_model(opts["out_dir"], "cpu")
    check_out_dir(os.path.dirname(os.path.abspath(ckpt["path"])))   # refine.npy goes there: writable, checked now
    data_dir = resolve_data_dir(ckpt, opts["data_dir"])   # refuses a dataset of another tokenizer
    path = split_path(data_dir, "train")
    if not os.path.isfile(path):
        raise UserError(f"{path} not found (fix: --data_dir=<the dataset round 1 trained on>)")
    # whole uint16 ids below the model's vocab_size, and at least one segment of block_size + 1 tokens
    split_tokens(data_dir, "train", model.config.vocab_size, model.config.block_size)
    data = np.memmap(path, dtype=np.uint16, mode="r")
    seg_len = model.config.block_size + 1
    starts = segment_starts(len(data), seg_len)
    check_options(opts["rate"], opts["temperature"], opts["parts"], len(starts))   # before the long scoring pass
    losses = segment_losses(model, data, starts, seg_len, opts["batch_size"])
    gen = torch.Generator().manual_seed(opts["seed"])
    keep = refine(losses, opts["rate"], opts["temperature"], opts["parts"], gen)
    out = os.path.join(os.path.dirname(ckpt["path"]), OUT_NAME)
    with atomic_open(out, "wb") as f:
        np.save(f, starts[keep])
    # what the offsets refer to: train.py refuses them for a train split of another length (another dataset)
    with atomic_open(segments_info_path(out), "w") as f:
        json.dump({"train_tokens": int(len(data)), "block_size": model.config.block_size, "data_dir": data_dir,
                   "tokenizer_id": ckpt.get("tokenizer_id")}, f, indent=1)
    print(f"{len(starts):,} segments of {seg_len} tokens in {path}: loss mean {losses.mean():.4f} "
          f"(min {losses.min():.4f}, max {losses.max():.4f})")
    print(f"kept {len(keep):,} ({len(keep) / len(starts):.0%}) with p = softmax(l / {opts['temperature']:g}): "
          f"their mean loss {losses[keep].mean():.4f}")
    # the dataset too: without it, train.py prepared its default dataset before refusing the other tokenizer
    print(f"wrote {out} (next round: python train.py ... --init_from={shlex.quote(ckpt['path'])} "
          f"--data_dir={shlex.quote(data_dir)} --data_segments={shlex.quote(out)})")
    return out


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main()
