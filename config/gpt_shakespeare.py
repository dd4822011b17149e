# Character-level Shakespeare on one GPU: the nanoGPT "baby GPT" recipe (~10.7M parameters).
# nanoGPT reports a few minutes on one GPU and val loss 1.4697. One H200 here (docs/gpu.md): 17.1 ms an iteration,
# best val loss 1.4665 at iteration 2000 (a run cut at 4692 of 5000 iterations; one seed).
#   python train.py config/gpt_shakespeare.py
#   python train.py config/gpt_shakespeare.py --variant=lgpt --out_dir=out-shakespeare-lgpt

out_dir = "out-shakespeare-char"
cpu_twin = "config/gpt_shakespeare_cpu.py"   # named (with the time estimate) when run on a CPU
eval_interval = 250   # the model overfits on this small dataset, so evaluate often
eval_iters = 200
log_interval = 10
always_save_checkpoint = False   # ckpt.pt only when val improves

dataset = "shakespeare_char"
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256   # context of up to 256 previous characters

n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2

learning_rate = 1e-3   # a small network can take a larger learning rate
max_iters = 5000
lr_decay_iters = 5000  # usually equal to max_iters
min_lr = 1e-4          # learning_rate / 10
beta2 = 0.99           # a bit larger because there are few tokens per iteration
warmup_iters = 100
