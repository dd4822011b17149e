"""
File size and decoding speed of the same checkpoints in every runtime, measured side by side in one run:
sample.py (eager PyTorch, KV cache), the compiled decoder (tools/fast_sample.py), ExecuTorch fp32 and 8da8w
(tools/executorch), llama.cpp f32 and q8_0 (tools/llamacpp, GPT-2/Llama shapes only, when llama_cpp is installed).
Prints a markdown table.

    python -m tools.executorch.bench --out_dirs=out,out-pgpt --work_dir=bench > table.md

Each runtime decodes --max_new_tokens tokens greedily after --start on one thread (OMP_NUM_THREADS=1; ExecuTorch's
XNNPACK and llama.cpp threadpools set to 1 too), re-priming the window at block_size as sample.py does; tokens/s is
the best of --repeats runs of the whole generation (prompt included), so start-up costs are left out (the compiled
decoder's first run, which compiles, is timed apart). The last column compares each runtime's greedy text with
sample.py's.
"""
import importlib.util
import os
import subprocess
import sys
import time

import torch

from configurator import UserError, run_command
from tools.executorch.run import SEPARATOR   # sample.py's, which the runner prints too

DEFAULTS = dict(
    out_dirs="out",         # comma-separated checkpoints (directories or .pt files)
    work_dir="bench",       # where the exported programs go
    start="War is ",
    max_new_tokens=500,
    repeats=3,
    reuse=False,            # keep the .pte files already in work_dir (an earlier run from the same checkpoints)
)


def timed_subprocess(command, repeats):
    """(best tokens/s of `command` as it reports on stderr ('N tokens in T s (R tokens/s)'), the text it prints)."""
    best, text = 0.0, None
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for _ in range(repeats):
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode:
            raise UserError(f"{' '.join(command)} failed: {last_line(done.stderr)} (fix: run it alone)")
        line = [l for l in done.stderr.splitlines() if "tokens/s" in l][-1]
        best = max(best, float(line.split("(")[-1].split()[0]))
        text = done.stdout.split("\n" + SEPARATOR + "\n")[0]
    return best, text


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no message"


def export_program(out_dir, pte, quantize):
    done = subprocess.run([sys.executable, "-m", "tools.executorch.export", f"--out_dir={out_dir}", f"--pte={pte}",
                           f"--quantize={quantize}"], capture_output=True, text=True)
    if done.returncode:
        raise UserError(f"exporting {out_dir} failed: {last_line(done.stderr)} "
                        f"(fix: run python -m tools.executorch.export --out_dir={out_dir} alone)")


def compiled_tokens_per_s(model, prompt, max_new_tokens, repeats):
    """(best tokens/s, seconds of the first run, which compiles, new ids) of tools/fast_sample.py's greedy
    decoding, in this process (one thread)."""
    from tools.fast_sample import generate
    idx = torch.tensor([prompt])
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            out = generate(model, idx, max_new_tokens, temperature=0)
            times.append(time.perf_counter() - t0)
    return max_new_tokens / min(times[1:]), times[0], out[0, len(prompt):].tolist()


def llamacpp_tokens_per_s(path, text, max_new_tokens, repeats):
    """(best tokens/s, new ids) of greedy decoding in llama.cpp, one thread (tools/llamacpp/run.py's loop)."""
    from tools.llamacpp.run import greedy, load, model_vocab
    llm = load(path, num_threads=1)
    prompt = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = greedy(llm, prompt, max_new_tokens, model_vocab(llm))
        best = max(best, max_new_tokens / (time.perf_counter() - t0))
    llm.close()
    return best, out[len(prompt):]


def agreement(texts, reference):
    """'same' for each runtime whose greedy text is sample.py's, else where it parts from it."""
    parts = []
    for name, text in texts.items():
        n = next((i for i, (a, b) in enumerate(zip(text, reference)) if a != b), min(len(text), len(reference)))
        parts.append(f"{name} same" if text == reference else f"{name} parts at char {n} of {len(reference)}")
    return "; ".join(parts)


def run(cfg):
    from checkpoint import check_out_dir, load_model
    from dataset import tokenizer_from_meta
    from tools.huggingface import ConversionError
    from tools.huggingface.convert import checkpoint_meta
    from tools.llamacpp import export as gguf_export
    for key in ("max_new_tokens", "repeats"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise UserError(f"--{key} must be a positive integer, got {cfg[key]!r} (fix: e.g. --{key}={DEFAULTS[key]})")
    if importlib.util.find_spec("executorch") is None:
        raise UserError("executorch is not installed (fix: pip install -r requirements-dev.txt)")
    check_out_dir(cfg["work_dir"], key="work_dir")   # a file, or not writable: one line, before any export
    os.makedirs(cfg["work_dir"], exist_ok=True)
    try:
        import llama_cpp  # noqa: F401
        have_llamacpp = True
    except ImportError:
        have_llamacpp = False
    common = [f"--start={cfg['start']}", f"--max_new_tokens={cfg['max_new_tokens']}", "--temperature=0"]
    header = ["model", "params", "fp32 weights MB", "sample.py tok/s", "compiled tok/s (compile s)",
              "ExecuTorch fp32 MB", "tok/s", "ExecuTorch 8da8w MB", "tok/s", "llama.cpp f32 MB", "tok/s",
              "llama.cpp q8_0 MB", "tok/s", "greedy text vs sample.py"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header), flush=True)
    for out_dir in cfg["out_dirs"].split(","):
        model, ckpt = load_model(out_dir, "cpu")
        meta, source = checkpoint_meta(ckpt)
        if meta is None:
            raise UserError(f"{ckpt['path']} records no dataset, so its tokenizer is unknown (fix: a checkpoint "
                            f"written by train.py)")
        tok = tokenizer_from_meta(meta)
        prompt = tok.encode(cfg["start"])
        name = os.path.basename(os.path.normpath(out_dir))
        params = model.get_num_params(non_embedding=False)
        eager = [sys.executable, "sample.py", f"--out_dir={out_dir}", "--num_samples=1", "--device=cpu",
                 "--num_threads=1", *common]
        speed, reference = timed_subprocess(eager, cfg["repeats"])
        row = [name, f"{params / 1e6:.2f}M", f"{params * 4 / 1e6:.2f}", f"{speed:.0f}"]
        texts = {}
        if model.config.think_steps:   # no static cache holds its memory (tools/executorch/export.py)
            row += ["Deep Thinking: no static cache", "-", "-", "-", "-"]
        else:
            speed, compile_s, new = compiled_tokens_per_s(model, prompt, cfg["max_new_tokens"], cfg["repeats"])
            row += [f"{speed:.0f} ({compile_s:.0f} s)"]
            texts["compiled"] = cfg["start"] + tok.decode(new)
            for quantize in ("none", "8da8w"):
                pte = os.path.join(cfg["work_dir"], f"{name}-{quantize}.pte")
                if not (cfg["reuse"] and os.path.isfile(pte)):
                    export_program(out_dir, pte, quantize)
                runner = [sys.executable, "-m", "tools.executorch.run", f"--pte={pte}", "--num_threads=1", *common]
                speed, texts[f"ExecuTorch {'fp32' if quantize == 'none' else quantize}"] = timed_subprocess(
                    runner, cfg["repeats"])
                row += [f"{os.path.getsize(pte) / 1e6:.2f}", f"{speed:.0f}"]
        for qtype in ("f32", "q8_0"):
            path = os.path.join(cfg["work_dir"], f"{name}-{qtype}.gguf")
            try:
                gguf_export.write_gguf(model, path, qtype, meta, source, say=lambda m: print(m, file=sys.stderr))
            except ConversionError as e:
                row += ["-", f"no GGUF: {str(e).split(':')[0].replace('cannot export ', '')}"]
                continue
            if have_llamacpp:
                speed, new = llamacpp_tokens_per_s(path, cfg["start"], cfg["max_new_tokens"], cfg["repeats"])
                texts[f"llama.cpp {qtype}"] = cfg["start"] + tok.decode(new)
            row += [f"{os.path.getsize(path) / 1e6:.2f}", f"{speed:.0f}" if have_llamacpp else "no llama_cpp"]
        row += [agreement(texts, reference)]
        print("| " + " | ".join(row) + " |", flush=True)   # each row as soon as it is measured


def main(argv=None):
    return run_command(run, DEFAULTS, argv, bool_flags=("reuse",))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
