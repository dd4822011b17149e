"""
Sample from a Hugging Face model (a local GPT-2 / Llama / MobileLLM directory, or a hub name) with sample.py's
options and generation: python -m tools.huggingface.sample --init_from=DIR --start "War is " [--data_dir=...]

The tokenizer is the model's own (tools/huggingface/tokenizer.py), or a prepared dataset's with --data_dir.
"""
import sys

import sample
from configurator import UserError, run_command
from dataset import load_tokenizer
from tools.huggingface.convert import load_pretrained
from tools.huggingface.tokenizer import tokenizer_for

DEFAULTS = {"init_from": "", **{k: v for k, v in sample.DEFAULTS.items() if k != "out_dir"}}


def run(cfg):
    if not cfg["init_from"]:
        raise UserError("--init_from is required (fix: --init_from=path/to/hf-model-dir or a hub name)")
    device, start_text = sample.check_options(cfg)
    model, info = load_pretrained(cfg["init_from"], device)
    tok = load_tokenizer(cfg["data_dir"]) if cfg["data_dir"] else tokenizer_for(info)
    dataset = cfg["data_dir"] or f"{info['source']}'s tokenizer"
    sample.write_samples(model, tok, start_text, cfg, device, f"{info['source']} (iter pretrained", dataset)


def main(argv=None):
    return run_command(run, DEFAULTS, argv, sample.BOOL_FLAGS)


if __name__ == "__main__":
    main(sys.argv[1:])
