"""
Sample from a Hugging Face model (a local GPT-2 / Llama / MobileLLM directory, or a hub name) with sample.py's
options and generation: python -m tools.huggingface.sample --init_from=DIR --start "War is " [--data_dir=...]

The tokenizer is the model's own (tools/huggingface/tokenizer.py), or a prepared dataset's with --data_dir.
"""
import sys

from model import GPT
import sample
from tools.huggingface.convert import checked_data_dir, load_pretrained, recorded_tokenizer_id
from tools.huggingface.convert import refuse_keep_heaviest_branch
from tools.huggingface.tokenizer import tokenizer_for
from safety_net.configurator import UserError, run_command
from safety_net.dataset import load_tokenizer
from safety_net.sampling import setup_sampling
from safety_net.tokenizers import encode_start

DEFAULTS = {"init_from": "", **{k: v for k, v in sample.DEFAULTS.items() if k != "out_dir"}}


def run(cfg):
    if not cfg["init_from"]:
        raise UserError("--init_from is required (fix: --init_from=path/to/hf-model-dir or a hub name)")
    refuse_keep_heaviest_branch(cfg["keep_heaviest_branch"])
    device, dtype, start_text, notes = setup_sampling(cfg)   # the options and --start, checked
    model, info = load_pretrained(cfg["init_from"], device)
    if cfg["data_dir"]:   # checked: the export's recorded tokenizer, or GPT-2's ids
        tok = load_tokenizer(checked_data_dir(info, cfg["data_dir"]))
    else:
        tok = tokenizer_for(info)
    # a model that records no tokenizer samples ids up to its vocab_size: a smaller vocabulary is not its own
    # (our export's padded vocab_size, with its tokenizer_id checked, draws only the tokenizer's ids)
    if cfg["data_dir"] and recorded_tokenizer_id(info) is None and tok.vocab_size < model.config.vocab_size:
        raise UserError(f"{cfg['data_dir']}'s tokenizer has {tok.vocab_size} tokens, fewer than the model's "
                        f"{model.config.vocab_size}: it cannot decode what the model samples (fix: --data_dir=<the "
                        f"dataset the model was trained on>, or leave it out to use the model's own tokenizer)")
    dataset = cfg["data_dir"] or f"{info['source']}'s tokenizer"
    start_ids = encode_start(tok, start_text, dataset, model.config.vocab_size)   # checked: one line
    source = f"{info['source']} (iter pretrained)"
    sample.write_samples(model, tok, start_text, start_ids, cfg, device, dtype, source, GPT.generate, notes)


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
