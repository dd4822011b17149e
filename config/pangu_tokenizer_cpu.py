# Paper 003, compact tokenizer (2.1): one model body (4 layers, width 64, 4 heads), trained on shakespeare
# tokenized with the full GPT-2 BPE (50257 tokens) or a compact K-token subset of it:
#   python prepare.py shakespeare && python -m tools.pangu.compact_vocab shakespeare --vocab_size 4096
#   python train.py config/pangu_tokenizer_cpu.py --dataset=shakespeare --out_dir=out-pangu-tok-50257
#   python train.py config/pangu_tokenizer_cpu.py --dataset=shakespeare_v4096 --out_dir=out-pangu-tok-4096
#   python -m tools.eval --out_dir=out-pangu-tok-4096     # bits per byte: comparable across tokenizers
# vocab_size comes from each dataset's meta.json.
out_dir = "out-pangu-tok"
eval_interval = 100
eval_iters = 10
log_interval = 50

dataset = "shakespeare_v4096"
batch_size = 8
block_size = 64

n_layer = 4
n_head = 4
n_embd = 64
dropout = 0.0

learning_rate = 2e-3
max_iters = 200
lr_decay_iters = 200
min_lr = 2e-4
beta2 = 0.99
warmup_iters = 20

device = "cpu"
compile = False
num_threads = 1
