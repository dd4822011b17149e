"""
Honest perplexity: evaluate a checkpoint on the WHOLE of each split, every token scored exactly once.

    python eval.py --out_dir=out-shakespeare-char                 # val (and test if present)
    python eval.py --out_dir=out-wt103 --splits=val,test --stride=512 --batch_size=4

Reported per split:
  loss            mean negative log-likelihood per scored token (nats)
  token ppl       exp(loss)
  word ppl        exp(total NLL / number of words)   words of the raw text, from meta.json
  bits per byte   total NLL / ln 2 / number of utf-8 bytes of the raw text
Word and byte counts come from meta.json (meta['splits'][split]['words' / 'bytes']); when meta.json has
none they are counted from the decoded split (exact for the char and byte-level BPE tokenizers; eot
separators left out), and the output says so.

Which tokens are scored. A split of N tokens has N - 1 targets (the first token has no context).
  default (--stride=0):  non-overlapping windows of block_size tokens; a token's context is only what
                         precedes it inside its window (0 .. block_size - 1 tokens). The last window is
                         shorter when N - 1 is not a multiple of block_size: it runs at its true length.
  --stride=S < block:    sliding windows: the first window scores all its block_size targets, every
                         later window moves S targets on and scores only its last S (the last window
                         scores what is left), so every token after the first window sees at least
                         block_size - S tokens of context. S=1 is the exact (slow) per-token limit.
No padding token is ever fed or scored. Windows of the same length are batched; no_grad; autocast on GPU.
"""

import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from configurator import UserError, autocast, resolve_device, resolve_dtype, run_command
from runfiles.checkpoint import keep_heaviest_branch, load_model
from runfiles.dataset import load_meta, resolve_data_dir
from runfiles.tokenizer import load_tokenizer

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the out*/ folder
                            # with the newest checkpoint (the run train.py just finished)
    data_dir="",            # "" = the dataset recorded in the checkpoint
    splits="",              # comma list, e.g. "val,test"; "" = val, and test if the dataset has one
    block_size=0,           # context window; 0 = the model's block_size (smaller values are allowed)
    stride=0,               # 0 = non-overlapping windows; S < block_size = sliding window scoring S tokens
    batch_size=8,           # windows per forward pass
    device="auto",
    dtype="auto",
    keep_heaviest_branch=False,  # pgpt: evaluate with only the heaviest branch (paper 004's inference)
    compile=False,
)
BOOL_FLAGS = ("keep_heaviest_branch", "compile")


# --- windows ------------------------------------------------------------------------------------

def window_plan(n, block_size, stride=0):
    """Windows that score every target (positions 1 .. n-1) exactly once.

    Returns [(start, end, n_scored)]: the window feeds data[start:end] and predicts data[start+1:end+1];
    only its last n_scored predictions count. stride 0 (or >= block_size) gives non-overlapping windows."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    stride = block_size if stride <= 0 or stride >= block_size else stride
    sliding = stride < block_size
    targets = n - 1                      # targets are positions 1 .. n-1
    plan, done = [], 0                   # done = targets 1 .. done are scored
    while done < targets:
        step = block_size if done == 0 else stride   # the first window scores everything it sees
        end = min(done + step, targets)              # window predicts targets up to position `end`
        start = max(0, end - block_size) if sliding else done
        plan.append((start, end, end - done))
        done = end
    return plan


def describe_method(block_size, stride):
    if stride <= 0 or stride >= block_size:
        return (f"non-overlapping windows of {block_size} tokens (context 0..{block_size - 1} tokens, "
                f"last window at its true length, no padding)")
    return (f"sliding window of {block_size} tokens, stride {stride}: each window scores its last {stride} "
            f"tokens (the first window all), so tokens after the first window see >= {block_size - stride} "
            f"tokens of context; no padding")


@torch.no_grad()
def evaluate_split(model, data, block_size, stride=0, batch_size=8, device="cpu", dtype=torch.float32):
    """Sum of the negative log-likelihoods of every token of `data` but the first, each scored once.

    data: 1-D array of token ids. Returns dict(nll_sum, n_tokens, n_windows, seconds)."""
    was_training = model.training
    model.eval()
    plan = window_plan(len(data), block_size, stride)
    nll_sum, n_tokens = 0.0, 0
    t0 = time.perf_counter()
    for batch in _batches(plan, batch_size):
        # windows in a batch share (length, n_scored), so they stack without padding
        k = batch[0][2]
        rows = np.stack([np.asarray(data[s:e + 1], dtype=np.int64) for s, e, _ in batch])
        rows = torch.from_numpy(rows).to(device)
        x, y = rows[:, :-1], rows[:, -k:]
        with autocast(device, dtype):
            logits, _ = model(x, all_logits=True)
        logits = logits[:, -k:].float()
        nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum")
        nll_sum += float(nll)
        n_tokens += y.numel()
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    model.train(was_training)
    return dict(nll_sum=nll_sum, n_tokens=n_tokens, n_windows=len(plan), seconds=time.perf_counter() - t0)


def _batches(plan, batch_size):
    """Consecutive windows of the same shape, at most batch_size at a time."""
    batch = []
    for w in plan:
        if batch and (len(batch) == batch_size or _shape(batch[0]) != _shape(w)):
            yield batch
            batch = []
        batch.append(w)
    if batch:
        yield batch


def _shape(window):
    start, end, k = window
    return end - start, k


# --- metrics ------------------------------------------------------------------------------------

def metrics(nll_sum, n_tokens, n_words=None, n_bytes=None):
    """loss, token ppl, word ppl (exp(total NLL / words)), bits per byte (total NLL / ln 2 / bytes)."""
    loss = nll_sum / n_tokens
    return dict(
        loss=loss,
        token_ppl=math.exp(loss),
        word_ppl=math.exp(nll_sum / n_words) if n_words else None,
        bpb=nll_sum / math.log(2) / n_bytes if n_bytes else None,
    )


def split_counts(meta, split, data, tok):
    """(words, bytes, source) of a split's raw text: from meta.json, else counted from the decoded tokens."""
    info = (meta.get("splits") or {}).get(split) or {}
    if info.get("words") and info.get("bytes"):
        return info["words"], info["bytes"], "meta.json"
    if tok is None:
        return None, None, "n/a"
    ids = np.asarray(data)
    eot = getattr(tok, "eot_token", None)
    if eot is not None:
        ids = ids[ids != eot]  # separators between articles are not text
    text = tok.decode(ids.tolist())
    return len(text.split()), len(text.encode("utf-8")), "counted from the decoded split"


# --- command line -------------------------------------------------------------------------------

def choose_splits(text, data_dir):
    if text:
        splits = [s.strip() for s in text.split(",") if s.strip()]
        for s in splits:
            if not os.path.isfile(os.path.join(data_dir, f"{s}.bin")):
                raise SystemExit(f"error: split '{s}' not found: no {s}.bin in {data_dir} "
                                 f"(fix: --splits=val or prepare the dataset with that split)")
        return splits
    return [s for s in ("val", "test") if os.path.isfile(os.path.join(data_dir, f"{s}.bin"))]


def fmt(v, spec=".4f"):
    return "n/a" if v is None else format(v, spec)


def main(argv=None):
    return run_command(run, DEFAULTS, argv, BOOL_FLAGS)


def run(cfg):
    device = str(resolve_device(cfg["device"]))
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    model, ckpt = load_model(cfg["out_dir"], device)
    block_size = cfg["block_size"] or model.config.block_size
    if not 1 <= block_size <= model.config.block_size:
        raise SystemExit(f"error: --block_size={block_size} must be in [1, {model.config.block_size}] "
                         f"(the model's context) (fix: leave it at 0)")
    if cfg["stride"] < 0 or cfg["stride"] > block_size or cfg["batch_size"] < 1:
        raise SystemExit(f"error: --stride must be in [0, {block_size}] and --batch_size >= 1 "
                         f"(fix: --stride=0 for non-overlapping windows)")
    data_dir = resolve_data_dir(ckpt, cfg["data_dir"])
    meta = load_meta(data_dir)
    splits = choose_splits(cfg["splits"], data_dir)
    if not splits:
        raise SystemExit(f"error: no val.bin or test.bin in {data_dir} (fix: run prepare.py, or pass --splits)")
    try:
        tok = load_tokenizer(data_dir)
    except UserError:
        tok = None  # only needed to count words/bytes when meta.json lacks them
    note = keep_heaviest_branch(model, cfg["keep_heaviest_branch"])
    if cfg["compile"]:
        model.compile()

    print(f"checkpoint: {ckpt['path']} (iter {ckpt.get('iter_num', '?')}, {model.get_num_params() / 1e6:.2f}M params)"
          + (f"; {note}" if note else ""))
    print(f"dataset: {data_dir} ({meta.get('tokenizer', '?')} tokenizer, vocab {meta.get('vocab_size', '?')}); "
          f"device {device}, {str(dtype).replace('torch.', '')}")
    print(f"method: {describe_method(block_size, cfg['stride'])}; every token but the first of each split "
          f"scored exactly once")
    rows = []
    for split in splits:
        data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
        if len(data) < 2:
            raise SystemExit(f"error: split '{split}' has {len(data)} tokens; nothing to score")
        r = evaluate_split(model, data, block_size, cfg["stride"], cfg["batch_size"], device, dtype)
        words, nbytes, source = split_counts(meta, split, data, tok)
        m = metrics(r["nll_sum"], r["n_tokens"], words, nbytes)
        rows.append((split, r, m, words, nbytes, source))
        print(f"  {split}: {r['n_tokens']:,} tokens in {r['n_windows']:,} windows, {r['seconds']:.1f}s "
              f"({r['n_tokens'] / max(r['seconds'], 1e-9):,.0f} scored tokens/s); words/bytes: {source}",
              flush=True)
    print()
    print("| split | tokens scored | words | bytes | loss | token ppl | word ppl | bits/byte | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for split, r, m, words, nbytes, _ in rows:
        print(f"| {split} | {r['n_tokens']:,} | {fmt(words, ',')} | {fmt(nbytes, ',')} | {m['loss']:.4f} | "
              f"{m['token_ppl']:.3f} | {fmt(m['word_ppl'], '.3f')} | {fmt(m['bpb'])} | "
              f"{r['n_tokens'] / max(r['seconds'], 1e-9):,.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
