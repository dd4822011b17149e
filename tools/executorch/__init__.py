"""
Our checkpoints as ExecuTorch programs (PyTorch's on-device runtime), and a runner that needs only that runtime.

    python -m tools.executorch.export --out_dir=out --pte=model.pte [--quantize=8da8w]  # + model.tokenizer.json
    python -m tools.executorch.run --pte=model.pte --start="War is " --max_new_tokens=200
    python -m tools.executorch.bench                                                    # results/device/README.md
"""
