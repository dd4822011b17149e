# nanoGPT's train.py defaults (GPT-2 124M on OpenWebText), for nanoGPT's own config files: they set only what
# differs from those defaults, and a key they leave out would take this repository's default instead (another
# dataset, learning rate, schedule, bias, ...). Give this file first, then theirs:
#   python train.py config/nanogpt.py ../nanoGPT/config/train_shakespeare_char.py --device=cpu --compile=False
# Only before a config that trains from scratch or resumes: the keys set here count as set, and a config that
# starts from GPT-2 (finetune_shakespeare.py, eval_gpt2*.py) would get this file's model shape over GPT-2's.
# device and dtype stay 'auto', which picks what nanoGPT's do on a GPU (cuda; bf16 where supported, else fp16).
# vocab_size is not set: it comes from the data (nanoGPT's 50304 for GPT-2 is 50257 padded; --vocab_size=50304).

out_dir = "out"
eval_interval = 2000
log_interval = 1
eval_iters = 200
eval_only = False
always_save_checkpoint = True
init_from = "scratch"

wandb_log = False
wandb_project = "owt"
wandb_run_name = "gpt2"

dataset = "openwebtext"
gradient_accumulation_steps = 5 * 8
batch_size = 12
block_size = 1024

n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0
bias = False

learning_rate = 6e-4
max_iters = 600000
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0

decay_lr = True
warmup_iters = 2000
lr_decay_iters = 600000
min_lr = 6e-5

backend = "nccl"
compile = True
