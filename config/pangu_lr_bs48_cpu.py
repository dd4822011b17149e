# Paper 003, batch size & learning rate (4.1): config/pangu_char_cpu.py's model with a 4x larger batch
# (48 instead of 12) and the training tokens of a 1600-iteration run at batch 12 (400 iterations; its batch-12
# partner: --max_iters=1600 --lr_decay_iters=1600 --warmup_iters=160, results/README.md), learning rate from
#   lr = (bs / bs_0)^r * lr_0,   bs_0 = 12, lr_0 = 1e-3 (the tuned small-batch recipe)
# An overlay: give it after config/pangu_char_cpu.py (it reads that file's block_size).
#   python train.py config/pangu_char_cpu.py config/pangu_lr_bs48_cpu.py                  # r = 0.5: 2e-3
#   python train.py config/pangu_char_cpu.py config/pangu_lr_bs48_cpu.py --learning_rate=4e-3 --min_lr=4e-4  # r = 1
#   python train.py config/pangu_char_cpu.py config/pangu_lr_bs48_cpu.py --learning_rate=1e-3 --min_lr=1e-4  # r = 0
from tools.pangu.scaled_lr import scaled_lr

_r = 0.5
_tokens = 1600 * 12 * 64         # the budget of a 1600-iteration run at batch 12
out_dir = "out-pangu-lr-bs48"
batch_size = 48
learning_rate = scaled_lr(batch_size, 12, 1e-3, _r)
min_lr = learning_rate / 10
max_iters = _tokens // (batch_size * block_size)
lr_decay_iters = max_iters
warmup_iters = max_iters // 10
eval_interval = 50
