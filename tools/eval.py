"""
Honest perplexity: evaluate a checkpoint on the WHOLE of each split, every token scored exactly once.

    python -m tools.eval --out_dir=out                                   # val (and test if present)
    python -m tools.eval --out_dir=out-wt103 --splits=val,test --stride=512 --batch_size=4
    python -m tools.eval --init_from=gpt2 --data_dir=data/wikitext103   # a Hugging Face model (see tools/huggingface/)
    python -m tools.eval --init_from=gpt2 --mc_file=hellaswag.jsonl     # zero-shot multiple choice: acc, acc_norm
    python -m tools.eval --init_from=hf-out --mc_file=task.jsonl --log_samples=items.jsonl   # + per-question results

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

Multiple choice (--mc_file=task.jsonl, one {"context": str, "choices": [str, ...], "label": int} per line):
the log-likelihood of each choice given the context, computed like lm-evaluation-harness does it:
continuation = " " + choice (trailing spaces of the context move into it), tokens = encode(context +
continuation) with the context's own tokens cut off the front, left-truncated to block_size + 1 tokens.
  acc       argmax of the summed log-likelihood is the label
  acc_norm  argmax of log-likelihood / len(choice) is the label (lm-evaluation-harness divides by the
            choice's length in characters, which is its byte length for ASCII text)
Choices are batched (longest first, padded on the right: a causal model's logits never see later
positions, so the padding changes nothing that is read). --log_samples=FILE writes one JSON line per
question (context, choices, label, per-choice log-likelihoods, the acc and acc_norm predictions), to compare
item by item with lm-evaluation-harness's --log_samples (docs/sampling_and_eval.md).
"""

import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from tools.huggingface.convert import checked_data_dir, load_pretrained, recorded_tokenizer_id
from tools.huggingface.convert import refuse_keep_heaviest_branch
from tools.huggingface.tokenizer import tokenizer_for
from safety_net.checkpoint import load_model
from safety_net.configurator import UserError, run_command
from safety_net.dataset import load_meta, resolve_data_dir
from safety_net.dataset import load_tokenizer
from safety_net.dataset import split_tokens
from safety_net.tokenizers import BPETokenizer
from safety_net.runtime import autocast, check_cpu_compiler, check_num_threads, resolve_device, resolve_dtype

DEFAULTS = dict(
    out_dir="",             # directory with ckpt.pt / last.pt, or a checkpoint file; "" = the out*/ folder
                            # with the newest checkpoint (the run train.py just finished)
    init_from="",           # a Hugging Face GPT-2 / Llama / MobileLLM directory or hub name instead of out_dir
    data_dir="",            # "" = the dataset recorded in the checkpoint (init_from: required for perplexity)
    mc_file="",             # JSONL multiple-choice task: report acc / acc_norm instead of perplexity
    log_samples="",         # with mc_file: write per-question results to this JSONL file (context, choices,
                            # per-choice log-likelihoods, predictions, label), as lm-eval's --log_samples
    gpt2_ranks="",          # local gpt2.tiktoken ranks file for GPT-2 BPE ("" = env GPT2_TIKTOKEN_FILE, else
                            # tiktoken's download)
    splits=[],              # e.g. --splits=val,test; [] = val, and test if the dataset has one
    block_size=0,           # context window; 0 = the model's block_size (smaller values are allowed)
    stride=0,               # 0 = non-overlapping windows; S < block_size = sliding window scoring S tokens
    batch_size=8,           # windows (or multiple-choice continuations) per forward pass
    device="auto",
    dtype="auto",
    keep_heaviest_branch=False,  # pgpt: evaluate with only the heaviest branch (paper 004's inference)
    compile=False,
    num_threads=0,          # CPU threads; 0 = torch's default (on a busy machine a note says so, as sample.py's)
)


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
        token_ppl=exp_or_inf(loss),
        word_ppl=exp_or_inf(nll_sum / n_words) if n_words else None,
        bpb=nll_sum / math.log(2) / n_bytes if n_bytes else None,
    )


def exp_or_inf(x):
    """exp(x), or inf where a float overflows (an untrained model on a text with few words)."""
    return math.exp(x) if x < 709 else float("inf")


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


# --- zero-shot multiple choice -----------------------------------------------------------------

def read_mc_file(path):
    """The questions of a JSONL task file: [{"context": str, "choices": [str, ...], "label": int}]."""
    import json
    try:
        with open(path, encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except OSError as e:
        raise UserError(f"cannot read --mc_file '{path}': {e.strerror} (fix: pass a JSONL task file)") from None
    except UnicodeDecodeError:
        raise UserError(f"--mc_file '{path}' is not UTF-8 text (fix: save it as UTF-8 JSONL)") from None
    docs = []
    for n, line in lines:
        try:
            doc = json.loads(line)
            ok = (isinstance(doc.get("context"), str) and isinstance(doc.get("choices"), list)
                  and len(doc["choices"]) >= 2 and all(isinstance(c, str) and c for c in doc["choices"])
                  and isinstance(doc.get("label"), int) and not isinstance(doc["label"], bool)   # true is no index
                  and 0 <= doc["label"] < len(doc["choices"]))
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise UserError(f"{path} line {n} is not a JSON object with context (text), choices (two or "
                             f"more non-empty texts) and label (index of the right choice) (fix: rewrite that line)")
        docs.append(doc)
    if not docs:
        raise UserError(f"{path} has no questions (fix: one JSON object per line)")
    return docs


def mc_request(tok, context, choice, block_size):
    """(tokens, n): the tokens to feed plus the one to predict last, and how many of the last are the
    continuation. lm-evaluation-harness's rules: the continuation is " " + choice, trailing whitespace of
    the context moves into it, its tokens are those of context + continuation after the context's own;
    an empty context becomes the eot token; the whole is left-truncated to block_size + 1 tokens."""
    continuation = " " + choice
    stripped = context.rstrip()
    continuation = context[len(stripped):] + continuation
    eot = getattr(tok, "eot_token", None)
    if not stripped and eot is None:
        raise UserError("a question has an empty context and the tokenizer has no eot token to "
                         "start from (fix: give every question a context)")
    try:
        ctx_ids = tok.encode(stripped) if stripped else [eot]
        cont_ids = tok.encode(stripped + continuation)[len(ctx_ids):] if stripped else tok.encode(continuation)
    except (ValueError, KeyError) as e:
        raise UserError(f"cannot encode the question {context[:40]!r}: {e} "
                         f"(fix: a tokenizer that covers the task's text, e.g. the model's own)")
    if not 1 <= len(cont_ids) <= block_size:
        raise UserError(f"choice {choice[:40]!r} is {len(cont_ids)} tokens; it must be 1..{block_size} "
                         f"(fix: shorter choices, or a model with a longer block_size)")
    return (ctx_ids + cont_ids)[-(block_size + 1):], len(cont_ids)


@torch.no_grad()
def continuation_loglikelihoods(model, requests, batch_size=8, device="cpu", dtype=torch.float32):
    """sum of log p(token | everything before it) over the last n tokens of each (tokens, n) request."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(requests)), key=lambda i: -len(requests[i][0]))
    out = [0.0] * len(requests)
    for first in range(0, len(order), batch_size):
        rows = order[first:first + batch_size]
        x = torch.zeros(len(rows), len(requests[rows[0]][0]) - 1, dtype=torch.long)
        for r, i in enumerate(rows):
            tokens = requests[i][0]
            x[r, :len(tokens) - 1] = torch.tensor(tokens[:-1])
        with autocast(str(device), dtype):
            logits, _ = model(x.to(device), all_logits=True)
        logprobs = F.log_softmax(logits.float(), dim=-1)
        for r, i in enumerate(rows):
            tokens, n = requests[i]
            end = len(tokens) - 1                       # positions end-n .. end-1 predict the last n tokens
            targets = torch.tensor(tokens[-n:], device=logprobs.device)
            out[i] = float(logprobs[r, end - n:end].gather(-1, targets[:, None]).sum())
    model.train(was_training)
    return out


def score_multiple_choice(model, tok, docs, block_size, batch_size=8, device="cpu", dtype=torch.float32):
    """acc, acc_norm (and their standard errors), the per-choice log-likelihoods and the time taken."""
    t0 = time.perf_counter()
    keys = [(d, c) for d, doc in enumerate(docs) for c in range(len(doc["choices"]))]
    requests = [mc_request(tok, docs[d]["context"], docs[d]["choices"][c], block_size) for d, c in keys]
    flat = continuation_loglikelihoods(model, requests, batch_size, device, dtype)
    lls = [[] for _ in docs]
    for (d, _), ll in zip(keys, flat):
        lls[d].append(ll)
    labels = np.array([doc["label"] for doc in docs])
    pred = np.array([int(np.argmax(ll)) for ll in lls])
    pred_norm = np.array([int(np.argmax(np.array(ll) / [len(c) for c in doc["choices"]]))
                          for ll, doc in zip(lls, docs)])
    acc, acc_norm = float(np.mean(pred == labels)), float(np.mean(pred_norm == labels))
    n = len(docs)
    return dict(acc=acc, acc_norm=acc_norm, acc_stderr=mean_stderr(acc, n), acc_norm_stderr=mean_stderr(acc_norm, n),
                n=n, n_choices=len(requests), lls=lls, pred=pred.tolist(), pred_norm=pred_norm.tolist(),
                seconds=time.perf_counter() - t0)


def write_log_samples(path, docs, r):
    """One JSON line per question: doc_id, context, choices, label, loglikelihoods (per choice, summed over the
    continuation's tokens), prediction (argmax, acc) and prediction_norm (argmax per character, acc_norm)."""
    import json
    from safety_net.fileio import atomic_open
    with atomic_open(path, "w") as f:
        for i, doc in enumerate(docs):
            f.write(json.dumps(dict(doc_id=i, context=doc["context"], choices=doc["choices"], label=doc["label"],
                                    loglikelihoods=r["lls"][i], prediction=r["pred"][i],
                                    prediction_norm=r["pred_norm"][i]), ensure_ascii=False) + "\n")


def mean_stderr(p, n):
    """Standard error of a mean of n 0/1 outcomes with mean p (sample standard deviation, as lm-eval reports)."""
    return math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else float("nan")


def data_dir_of(cfg, ckpt, info):
    """The dataset folder, checked against the model's tokenizer: a checkpoint's recorded one (resolve_data_dir),
    or a Hugging Face model's (checked_data_dir: an export's tokenizer_id, or GPT-2's ids)."""
    if info is not None:
        return checked_data_dir(info, cfg["data_dir"])
    return resolve_data_dir(ckpt, cfg["data_dir"])


def run_multiple_choice(cfg, model, ckpt, info, block_size, device, dtype):
    docs = read_mc_file(cfg["mc_file"])
    if info is not None and not cfg["data_dir"]:
        tok = tokenizer_for(info)
    else:
        tok = load_tokenizer(data_dir_of(cfg, ckpt, info), ckpt)
    check_ranks_read(cfg, tok)
    note = model.keep_heaviest_branch() if cfg["keep_heaviest_branch"] else ""   # pgpt: a note for the user
    if cfg["compile"]:   # it was ignored here (a hunt)
        model.compile()
    r = score_multiple_choice(model, tok, docs, block_size, cfg["batch_size"], device, dtype)
    if cfg["log_samples"]:
        write_log_samples(cfg["log_samples"], docs, r)
    print(f"model: {ckpt['path']} ({model.get_num_params(non_embedding=False) / 1e6:.2f}M params)" + (f"; {note}" if note else ""))
    print(f"task: {cfg['mc_file']}, {r['n']:,} questions, {r['n_choices']:,} choices scored in {r['seconds']:.1f}s "
          f"on {device}; context left-truncated to {block_size} tokens{COMPILE_TIMED if cfg['compile'] else ''}")
    print()
    print("| task | questions | acc | acc_norm |")
    print("|---|---:|---:|---:|")
    print(f"| {os.path.basename(cfg['mc_file'])} | {r['n']:,} | {r['acc']:.4f} ± {r['acc_stderr']:.4f} | "
          f"{r['acc_norm']:.4f} ± {r['acc_norm_stderr']:.4f} |")
    if cfg["log_samples"]:
        print(f"per-question results: {cfg['log_samples']}")


# --- command line -------------------------------------------------------------------------------

def choose_splits(splits, data_dir):
    if splits:
        twice = sorted({s for s in splits if splits.count(s) > 1})
        if twice:   # it scored that split twice and printed two rows (a hunt)
            raise UserError(f"--splits names {twice[0]} twice (fix: --splits={','.join(dict.fromkeys(splits))})")
        for s in splits:
            if not os.path.isfile(os.path.join(data_dir, f"{s}.bin")):
                raise UserError(f"split '{s}' not found: no {s}.bin in {data_dir} "
                                 f"(fix: --splits=val or prepare the dataset with that split)")
        return splits
    return [s for s in ("val", "test") if os.path.isfile(os.path.join(data_dir, f"{s}.bin"))]


# the times and tokens/s of a --compile run: each new shape of window compiles in the first forward of that shape,
# so they are not the compiled speed (a hunt: 511 tokens/s, against 245,537 without --compile)
COMPILE_TIMED = "; --compile: the times include compiling each shape of window"


def check_ranks_read(cfg, tok):
    """--gpt2_ranks builds GPT-2's own vocabulary only: with a char-level, compact or Hugging Face tokenizer it was
    accepted and read by nothing (a hunt)."""
    if not cfg["gpt2_ranks"]:
        return
    if isinstance(tok, BPETokenizer) and tok.enc.name == "gpt2":
        return
    raise UserError("--gpt2_ranks is read only for a GPT-2 BPE vocabulary, and this model's tokenizer is another "
                    "(fix: drop --gpt2_ranks)")


def fmt(v, spec=".4f"):
    return "n/a" if v is None else format(v, spec)


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


def run(cfg):
    check_outputs(cfg)
    check_num_threads(cfg["num_threads"])
    if cfg["num_threads"] > 0:
        torch.set_num_threads(cfg["num_threads"])
    ranks = cfg["gpt2_ranks"]
    if not ranks:
        return run_eval(cfg)
    if not os.path.isfile(ranks):
        raise UserError(f"--gpt2_ranks: {ranks} is not a file (fix: point it to a gpt2.tiktoken ranks file, "
                        f"or leave it out)")
    previous = os.environ.get("GPT2_TIKTOKEN_FILE")
    os.environ["GPT2_TIKTOKEN_FILE"] = ranks   # what tokenizers.get_gpt2_encoding reads
    try:
        return run_eval(cfg)
    finally:
        if previous is None:
            del os.environ["GPT2_TIKTOKEN_FILE"]
        else:
            os.environ["GPT2_TIKTOKEN_FILE"] = previous


def check_outputs(cfg):
    """--log_samples: only with --mc_file, and a file that can be written (checked before any scoring). With
    --mc_file, no option of perplexity's: --splits and --stride were accepted and changed nothing (a hunt)."""
    ignored = [key for key in ("splits", "stride") if cfg["mc_file"] and cfg[key] != DEFAULTS[key]]
    if ignored:
        raise UserError(f"--{ignored[0]} is an option of perplexity's; --mc_file scores multiple-choice questions, "
                        f"each whole (fix: drop {' and '.join('--' + key for key in ignored)})")
    path = cfg["log_samples"]
    if not path:
        return
    if not cfg["mc_file"]:
        raise UserError("--log_samples writes the per-question results of --mc_file (fix: add --mc_file=TASK.jsonl, "
                        "or drop --log_samples)")
    if os.path.exists(path) and os.path.exists(cfg["mc_file"]) and os.path.samefile(path, cfg["mc_file"]):
        raise UserError(f"--log_samples={path} is the --mc_file it scores: it would be replaced (fix: another "
                        f"file, e.g. --log_samples=samples.jsonl)")
    from safety_net.fileio import check_out_dir, check_out_file
    check_out_dir(os.path.dirname(path) or ".", key="log_samples")
    # a file that write_log_samples did not write is refused (any file was replaced; a hunt)
    check_out_file(path, "samples.jsonl", marker='{"doc_id": ', key="log_samples")


def run_eval(cfg):
    device = str(resolve_device(cfg["device"]))
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    if cfg["compile"]:
        check_cpu_compiler(device)
    if cfg["init_from"] and cfg["out_dir"]:   # --out_dir was dropped without a word (a hunt)
        raise UserError(f"--out_dir={cfg['out_dir']} and --init_from={cfg['init_from']} name two models (fix: "
                        f"--out_dir for a run of ours, --init_from for a Hugging Face model, not both)")
    if cfg["init_from"]:
        refuse_keep_heaviest_branch(cfg["keep_heaviest_branch"])
        model, info = load_pretrained(cfg["init_from"], device)
        ckpt = {"path": info["source"], "iter_num": "pretrained", "tokenizer_id": recorded_tokenizer_id(info)}
    else:
        model, ckpt = load_model(cfg["out_dir"], device)
        info = None
    block_size = cfg["block_size"] or model.config.block_size
    if not 1 <= block_size <= model.config.block_size:
        raise UserError(f"--block_size={block_size} must be in [1, {model.config.block_size}] "
                         f"(the model's context) (fix: leave it at 0)")
    if cfg["stride"] < 0 or cfg["stride"] > block_size:
        raise UserError(f"--stride must be in [0, {block_size}] (fix: --stride=0 for non-overlapping windows)")
    if cfg["batch_size"] < 1:
        raise UserError(f"--batch_size={cfg['batch_size']} must be >= 1 (fix: --batch_size={DEFAULTS['batch_size']})")
    if cfg["mc_file"]:
        return run_multiple_choice(cfg, model, ckpt, info, block_size, device, dtype)
    if info is not None and not cfg["data_dir"]:
        raise UserError("perplexity of a Hugging Face model needs token files: --data_dir=<dataset "
                         "tokenized with the model's tokenizer> (fix: e.g. --data_dir=data/wikitext103 for GPT-2)")
    data_dir = data_dir_of(cfg, ckpt, info)
    meta = load_meta(data_dir, ckpt)
    if meta.get("vocab_size", 0) > model.config.vocab_size:
        raise UserError(f"{data_dir} has a vocabulary of {meta['vocab_size']} tokens, more than the model's "
                         f"{model.config.vocab_size} (fix: a dataset tokenized with the model's tokenizer)")
    splits = choose_splits(cfg["splits"], data_dir)
    if not splits:
        raise UserError(f"no val.bin or test.bin in {data_dir} (fix: run prepare.py, or pass --splits)")
    for split in splits:   # before any scoring: whole uint16 ids below vocab_size, at least 2 of them
        split_tokens(data_dir, split, meta["vocab_size"])
    try:
        tok = load_tokenizer(data_dir, ckpt)
    except UserError:
        if cfg["gpt2_ranks"]:   # the ranks file named could not build it: say why
            raise
        tok = None  # only needed to count words/bytes when meta.json lacks them
    check_ranks_read(cfg, tok)
    note = model.keep_heaviest_branch() if cfg["keep_heaviest_branch"] else ""   # pgpt: a note for the user
    if cfg["compile"]:
        model.compile()

    print(f"checkpoint: {ckpt['path']} (iter {ckpt.get('iter_num', '?')}, {model.get_num_params(non_embedding=False) / 1e6:.2f}M params)"
          + (f"; {note}" if note else ""))
    print(f"dataset: {data_dir} ({meta.get('tokenizer', '?')} tokenizer, vocab {meta.get('vocab_size', '?')}); "
          f"device {device}, {str(dtype).replace('torch.', '')}")
    print(f"method: {describe_method(block_size, cfg['stride'])}; every token but the first of each split "
          f"scored exactly once{COMPILE_TIMED if cfg['compile'] else ''}")
    rows = []
    for split in splits:
        data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
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
