"""
Paper 003 (PanGu-pi Pro, text in ../shared/papers/) tools, each run from the repository root:

    python -m tools.pangu.inherit --init_from=out-big --out_dir=out-small --n_layer=3 --n_embd=64   # 3.2 parameter inheritance
    python -m tools.pangu.refine --out_dir=out-round1 --rate=0.5                              # 4.2 data refining
    python -m tools.pangu.compact_vocab shakespeare --vocab_size 8192                         # 2.1 compact tokenizer
    from tools.pangu.scaled_lr import scaled_lr  # 4.1 batch size -> learning rate, in a config file

The model-side techniques of the paper (initialization, tokenizer size) are GPTConfig flags in model.py;
the initialization formulas are model.py's init_by_scheme and redraw.
"""
