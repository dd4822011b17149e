"""
The safety net: what keeps a run safe and exact, which a learner can skip. The story (model.py, train.py,
sample.py, prepare.py) calls it like a library; it imports no story file but model.py (to build the model a
checkpoint describes), and never tools/. One job per module:
  configurator    config files and --key=value, UserError (one-line errors), Ctrl-C's exit code 130
  fileio          atomic writes, the temporary files a killed writer left, one writer per out_dir
  checkpoint      the checkpoint format, its one writer, safe loading (ours of any version, nanoGPT's, imported)
  build           GPTConfig's arguments, GPTConfig and GPT built with one-line errors and size limits
  runtime         device, dtype, threads, seeds, torchrun and the RNG states
  sampling        sample.py's option checks and its prompt (--start=FILE:path)
  tokenizers      char, GPT-2 BPE and compact, as meta.json names them; the prompt's ids; text as tokens come
  dataset         a prepared dataset folder and its tokenizer, token-file checks
  text_dataset    a text file as a dataset: its checks, and writing the folder
  download        downloads checked by size and sha256; tinyshakespeare's input
  train_config    train.py's config checks
  starting_point  the data and the checkpoint a run starts from
  stop            Ctrl-C and SIGTERM during training (DDP ranks vote)
  run_dir         out_dir while a run writes it: its lock, the notes before a run, what a stop or a NaN leaves
  run_log         log.csv, loss.png, speed and time left
  wandb_log       nanoGPT's W&B logging
"""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository (safety_net/'s parent)
