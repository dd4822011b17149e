"""
File size and decoding speed of the same checkpoints in every runtime, measured side by side in one run:
sample.py (eager PyTorch, KV cache), ExecuTorch fp32 and 8da8w (tools/executorch), llama.cpp f32 and q8_0
(tools/llamacpp, GPT-2/Llama shapes only, when llama_cpp is installed). Prints a markdown table.

    python -m tools.executorch.bench --out_dirs=out,out-pgpt --work_dir=bench > table.md

Each runtime decodes --max_new_tokens tokens greedily after --start on one thread (OMP_NUM_THREADS=1; ExecuTorch's
XNNPACK and llama.cpp threadpools set to 1 too), re-priming the window at block_size as sample.py does; tokens/s is
the best of --repeats runs of the whole generation (prompt included), so start-up costs are left out.
"""
import os
import subprocess
import sys
import time

import torch

from configurator import UserError, run_command

DEFAULTS = dict(
    out_dirs="out",         # comma-separated checkpoints (directories or .pt files)
    work_dir="bench",       # where the exported programs go
    start="War is ",
    max_new_tokens=500,
    repeats=3,
    reuse=False,            # keep the .pte files already in work_dir (an earlier run from the same checkpoints)
)


def tokens_per_s(command, repeats):
    """Best tokens/s of `command`, as it reports on stderr ('N tokens in T s (R tokens/s)')."""
    best = 0.0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for _ in range(repeats):
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode:
            raise UserError(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1]} (fix: run it alone)")
        line = [l for l in done.stderr.splitlines() if "tokens/s" in l][-1]
        best = max(best, float(line.split("(")[-1].split()[0]))
    return best


def llamacpp_tokens_per_s(path, text, max_new_tokens, repeats):
    """Greedy decoding in llama.cpp, one thread (tools/llamacpp/run.py's loop)."""
    from tools.llamacpp.run import greedy, load, model_vocab
    llm = load(path, num_threads=1)
    prompt = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        greedy(llm, prompt, max_new_tokens, model_vocab(llm))
        best = max(best, max_new_tokens / (time.perf_counter() - t0))
    return best


def run(cfg):
    from checkpoint import load_model
    from tools.executorch import export as et_export
    from tools.huggingface import ConversionError
    from tools.huggingface.convert import checkpoint_meta
    from tools.llamacpp import export as gguf_export
    os.makedirs(cfg["work_dir"], exist_ok=True)
    try:
        import llama_cpp  # noqa: F401
        have_llamacpp = True
    except ImportError:
        have_llamacpp = False
    common = [f"--start={cfg['start']}", f"--max_new_tokens={cfg['max_new_tokens']}", "--temperature=0"]
    header = ["model", "params", "fp32 weights MB", "sample.py tok/s", "ExecuTorch fp32 MB", "tok/s",
              "ExecuTorch 8da8w MB", "tok/s", "llama.cpp f32 MB", "tok/s", "llama.cpp q8_0 MB", "tok/s"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header), flush=True)
    for out_dir in cfg["out_dirs"].split(","):
        model, ckpt = load_model(out_dir, "cpu")
        name = os.path.basename(os.path.normpath(out_dir))
        params = model.get_num_params(non_embedding=False)
        eager = [sys.executable, "sample.py", f"--out_dir={out_dir}", "--num_samples=1", "--device=cpu",
                 "--num_threads=1", *common]
        row = [name, f"{params / 1e6:.2f}M", f"{params * 4 / 1e6:.2f}", f"{tokens_per_s(eager, cfg['repeats']):.0f}"]
        for quantize in ("none", "8da8w"):
            pte = os.path.join(cfg["work_dir"], f"{name}-{quantize}.pte")
            if not (cfg["reuse"] and os.path.isfile(pte)):
                subprocess.run([sys.executable, "-m", "tools.executorch.export", f"--out_dir={out_dir}", f"--pte={pte}",
                                f"--quantize={quantize}"], check=True, capture_output=True)
            runner = [sys.executable, "-m", "tools.executorch.run", f"--pte={pte}", "--num_threads=1", *common]
            speed = tokens_per_s(runner, cfg["repeats"])
            row += [f"{os.path.getsize(pte) / 1e6:.2f}", f"{speed:.0f}"]
        for qtype in ("f32", "q8_0"):
            path = os.path.join(cfg["work_dir"], f"{name}-{qtype}.gguf")
            try:
                meta, source = checkpoint_meta(ckpt)
                gguf_export.write_gguf(model, path, qtype, meta, source, say=lambda m: print(m, file=sys.stderr))
            except ConversionError as e:
                row += ["-", f"no GGUF: {str(e).split(':')[0].replace('cannot export ', '')}"]
                continue
            speed = (f"{llamacpp_tokens_per_s(path, cfg['start'], cfg['max_new_tokens'], cfg['repeats']):.0f}"
                     if have_llamacpp else "llama_cpp not installed")
            row += [f"{os.path.getsize(path) / 1e6:.2f}", speed]
        print("| " + " | ".join(row) + " |", flush=True)   # each row as soon as it is measured


def main(argv=None):
    return run_command(run, DEFAULTS, argv, bool_flags=("reuse",))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
