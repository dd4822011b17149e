"""
What a script that samples checks before anything is loaded (sample.py, tools/fast_sample.py,
tools/huggingface/sample.py): its options (setup_sampling, check_temperature), with one-line errors, and the
prompt, --start's text or FILE:path (read_prompt).
"""

import math
import sys

import torch

from safety_net.configurator import UserError
from safety_net.runtime import busy_machine, check_num_threads, check_seed, resolve_device, resolve_dtype


def setup_sampling(cfg):
    """What a script that samples (sample.py, tools/fast_sample.py, tools/huggingface/sample.py) checks and sets
    before anything is loaded: --num_samples, --max_new_tokens, --top_k, --temperature, --seed, --num_threads (set
    here), --device, --dtype and --start (the text, or FILE:path read: read_prompt), with one-line errors. Returns
    (torch.device, torch dtype, the prompt's text, notes): notes, a line when other jobs keep the CPUs busy, go in
    write_samples' header, after every check (printed here, it came before the error line of a checkpoint refused)."""
    check_sampling_options(cfg)
    if cfg["num_threads"] > 0:
        torch.set_num_threads(cfg["num_threads"])
    device = resolve_device(cfg["device"])
    dtype = getattr(torch, resolve_dtype(cfg["dtype"], device))
    # stdout in an encoding that lacks a sampled character (Windows' cp1252 in a file: python sample.py > out.txt)
    # printed a UnicodeEncodeError traceback mid-sample (a hunt): such a character prints as '?'
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")
    start_text = read_prompt(cfg["start"])
    busy = busy_machine(device)
    notes = [busy] if busy else []
    return device, dtype, start_text, notes


def check_sampling_options(cfg):
    """--num_samples, --max_new_tokens, --top_k, --temperature, --seed and --num_threads, each in one line: sample.py's
    (setup_sampling) and the runners' that promise its text (tools.executorch.run lumped three keys in one
    message; a hunt)."""
    if cfg["num_samples"] < 1:
        raise UserError(f"--num_samples={cfg['num_samples']}: must be >= 1 (fix: e.g. --num_samples=1)")
    if cfg["max_new_tokens"] < 0:
        raise UserError(f"--max_new_tokens={cfg['max_new_tokens']}: must be >= 0 (fix: e.g. --max_new_tokens=500)")
    if cfg["top_k"] < 0:
        raise UserError("--top_k must be >= 0 (fix: 0 means no top-k)")
    check_temperature(cfg["temperature"])
    check_seed(cfg["seed"])
    check_num_threads(cfg["num_threads"])


MIN_TEMPERATURE = 1e-6   # float32 logits / 1e-6 stay finite (|logit| < 1e32); float32 rounds 1e-300 itself to 0


def check_temperature(temperature, key="temperature"):
    """UserError unless the sampling temperature is 0 (greedy) or a finite number >= MIN_TEMPERATURE: below it
    logits / temperature overflows to inf, and NaN or inf (a config file's float("nan"), or 1e999) made every
    probability NaN or equal, sampling garbage without a word. sample.py and tools/compare.py check it here."""
    if temperature < 0:
        raise UserError(f"--{key} must be >= 0, got {temperature:g} (fix: 0 means greedy)")
    if not math.isfinite(temperature):
        raise UserError(f"--{key}={temperature} is not a finite number (fix: e.g. --{key}=0.8, or 0 for greedy "
                        f"decoding)")
    if 0 < temperature < MIN_TEMPERATURE:   # logits / temperature would overflow to inf: NaN probabilities
        raise UserError(f"--{key}={temperature:g} is too small to divide the logits by (fix: --{key}=0 for greedy "
                        f"decoding, or {MIN_TEMPERATURE:g} or more)")


def read_prompt(start):
    """sample.py's --start: the text itself, or the contents of the file named by FILE:path. Its line ends ("\r\n",
    "\r") are read as "\n", as nanoGPT's sample.py reads them (text mode), and a byte-order mark, as Windows Notepad
    writes, is dropped: a Notepad prompt fits a model of a text with "\n" (the common case; a model of a CRLF text,
    whose line ends prepare.py keeps, is prompted with "\n" too)."""
    if not start.startswith("FILE:"):
        try:   # bytes a shell passed that are not UTF-8 arrive as lone surrogates, which GPT-2's BPE read as '\ufffd'
            start.encode("utf-8")
        except UnicodeEncodeError as e:
            raise UserError(f"--start holds bytes that are not UTF-8 text (at character {e.start}) (fix: give it in "
                            f"UTF-8, or as --start=FILE:path of a UTF-8 text file)") from None
        return start
    path = start[len("FILE:"):]
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else e
        raise UserError(f"cannot read the start file '{path}': {reason} "
                        f"(fix: --start=FILE:path must name a readable utf-8 text file)") from None
