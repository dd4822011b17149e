"""
The files of a run, shared by the scripts (train.py, sample.py, eval.py, bench.py, compare.py, pangu/):

    runfiles.dataset     a prepared dataset folder: meta.json, its token files, training/eval batches
    runfiles.runlog      out_dir/log.csv: writing it during training and reading it back
"""
