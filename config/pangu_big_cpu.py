# Paper 003, parameter inheritance (3.2): the "big" char-level source model, 6 layers, width 128, 4 heads of
# 32 (1.2M parameters), trained 1500 iterations; tools/pangu/inherit.py then cuts it to config/pangu_char_cpu.py's shape:
# An overlay: give it after config/pangu_char_cpu.py.
#   python train.py config/pangu_char_cpu.py config/pangu_big_cpu.py
#   python -m tools.pangu.inherit --init_from=out-pangu-big --out_dir=out-pangu-inh --n_layer=3 --n_embd=64 --num_threads=1
#   python train.py config/pangu_char_cpu.py --init_from=out-pangu-inh/ckpt.pt --out_dir=out-pangu-inh-run
# (pangu_char_cpu.py's shape keys equal the inherited model's, so every inherited tensor is copied.)
out_dir = "out-pangu-big"
n_layer = 6
n_head = 4
n_embd = 128
max_iters = 1500
lr_decay_iters = 1500
