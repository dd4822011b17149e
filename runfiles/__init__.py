"""
The files of a run, shared by the scripts (train.py, sample.py, eval.py, bench.py, compare.py, pangu/):

    runfiles.dataset     a prepared dataset folder: meta.json, its token files, training/eval batches
    runfiles.tokenizer   the tokenizer meta.json describes; prompts to ids and samples back to text
    runfiles.checkpoint  ckpt.pt / last.pt: atomic writes, loading a model, RNG state, out_dir checks,
                         the Ctrl-C / SIGTERM stop request
    runfiles.runlog      out_dir/log.csv: writing it during training and reading it back
    runfiles.plots       loss.png of a run, and the comparison figures of compare.py
"""
