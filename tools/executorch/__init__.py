"""
Our checkpoints as ExecuTorch programs (PyTorch's on-device runtime), and a runner that needs only that runtime.

    python -m tools.executorch.export --out_dir=out --pte=model.pte [--quantize=8da8w|8da4w]  # + tokenizer
    python -m tools.executorch.run --pte=model.pte --start="War is " --max_new_tokens=200
    python -m tools.executorch.bench --shapes=llama_10m --num_threads=1,2     # every runtime side by side: results/device
    python -m tools.executorch.profile --pte=model.pte                    # per operator: results/device/profile.md
    python -m tools.executorch.step_time --out_dir=out --pte=model.pte --prime=16 --steps=32   # a decode step
"""
