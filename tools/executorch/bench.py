"""
File size and decoding speed of the same weights in every runtime, side by side in one run: sample.py (eager
PyTorch, KV cache), the compiled decoder (tools/fast_sample.py), ExecuTorch fp32, 8da8w and 8da4w
(tools/executorch), llama.cpp f32 and q8_0 (tools/llamacpp: GPT-2/Llama shapes, when llama_cpp is installed).
Prints two markdown tables: speed (tokens/s and GB/s of weights, a row per model and thread count), then sizes
and each runtime's greedy text against sample.py's.

    python -m tools.executorch.bench --shapes=llama_10m,mobilellm_125m,gpt,pgpt,lgpt,cgpt --num_threads=1,2
    python -m tools.executorch.bench --out_dirs=out,out-pgpt --work_dir=bench     # trained checkpoints

--shapes are models at their initialisation (seed 0) with --data_dir's vocabulary (a char dataset: 65 tokens), in
work_dir: llama_10m (the Llama shape of issue 41: 6 x 384, 6 heads, SwiGLU 1024, RoPE, RMSNorm, no biases, tied,
context 256: 10.65M parameters) or any preset of variants/ at its size (mobilellm_125m: 30 x 576, context 2048;
with 65 tokens instead of its 32000 it has 106.2M of its 124.6M parameters). Speed does not depend on what the
weights learned; the agreement column does (at the init, logits are nearly flat, so 8-bit texts part early).

Each runtime decodes --max_new_tokens tokens greedily after --start, re-priming the window at block_size as
sample.py does, with --num_threads threads (torch's, ExecuTorch's pool, llama.cpp's; OMP_NUM_THREADS). tokens/s is the
best of --repeats runs of the whole generation (prompt included, process start-up left out); the runs interleave
(every runtime once, then again), so a change of load touches all of them alike. GB/s = the weights' file size x
tokens/s (fp32 weights for sample.py and the compiled decoder): the bytes a decode step must read. The compiled
decoder is tools/fast_sample.py's default, --compile_mode=frozen (the weights frozen into the graph, inductor's own
GEMM kernels); its first run, which compiles, is timed apart ("compile s"). sample.py, ExecuTorch's runner and
llama.cpp run in their own processes, as their commands do (no runtime shares its process, threads or libraries
with another), the compiled decoder in this one. The output names the CPU (lscpu's "Model name", its family and
model, AVX-512 and AMX): speeds are of that CPU only.
"""
import importlib.util
import os
import platform
import subprocess
import sys
import time

import torch

from tools.executorch.run import SEPARATOR   # sample.py's, which the runner prints too
from safety_net.configurator import UserError, run_command

DEFAULTS = dict(
    shapes=[],              # llama_10m or presets of variants/, at their initialisation (a comma list)
    out_dirs=[],            # trained checkpoints, directories or .pt files (a comma list)
    data_dir="",            # the vocabulary of --shapes; "" = data/shakespeare_char (python prepare.py
                            # shakespeare_char); --out_dirs' checkpoints have their own
    work_dir="bench",       # where the checkpoints of --shapes, the programs and the GGUF files go
    num_threads=[1],        # thread counts, each a run of every runtime, e.g. --num_threads=1,2
    start="War is ",
    max_new_tokens=500,
    repeats=3,
    reuse=False,            # keep the files already in work_dir (an earlier run of the same models)
)
# the Llama shape of issue 41 (ours: the baseline of paper 004 made Llama-like), 10.65M parameters at 65 tokens
LLAMA_10M = dict(block_size=256, n_layer=6, n_head=6, n_embd=384, bias=False, norm="rmsnorm", pos_embedding="rope",
                 mlp_type="gated", activation="silu", mlp_hidden=1024, tie_embeddings=True)
QUANTIZE = ("none", "8da8w", "8da4w")
GGUF_TYPES = ("f32", "q8_0")
RUNTIMES = ("sample.py", "compiled") + tuple(f"ExecuTorch {'fp32' if q == 'none' else q}" for q in QUANTIZE) + \
    tuple(f"llama.cpp {t}" for t in GGUF_TYPES)
# (slower, faster): the ratios the speed table gives, issue 41's targets
RATIOS = (("ExecuTorch fp32", "llama.cpp f32"), ("ExecuTorch 8da8w", "llama.cpp q8_0"), ("compiled", "llama.cpp f32"))


def shape_checkpoint(name, data_dir, work_dir, reuse):
    """work_dir/<name>/ckpt.pt: the model of shape `name` at its initialisation (seed 0), `data_dir`'s vocabulary."""
    import dataclasses
    from safety_net.build import build_model, model_args
    from safety_net.checkpoint import save_checkpoint
    from safety_net.dataset import load_meta
    out_dir = os.path.join(work_dir, name)
    if reuse and os.path.isfile(os.path.join(out_dir, "ckpt.pt")):
        return out_dir
    meta = load_meta(data_dir)
    if name == "llama_10m":
        args = model_args({}, [], base=LLAMA_10M, vocab_size=meta["vocab_size"])
    else:
        args = model_args({"variant": name}, [], vocab_size=meta["vocab_size"])   # one-line error if unknown
    torch.manual_seed(0)
    model = build_model(args)
    save_checkpoint(os.path.join(out_dir, "ckpt.pt"), model.state_dict(), dataclasses.asdict(model.config),
                    iter_num=0, best_val_loss=float("nan"), config={}, dataset=meta.get("dataset", ""),
                    data_dir=os.path.abspath(data_dir), source=shape_source(name))
    return out_dir


def shape_source(name):
    return f"tools.executorch.bench --shapes={name}, at its initialisation"


def check_shape_folder(name, work_dir):
    """One line when work_dir/<name>/ holds a checkpoint that is not this shape's (shape_checkpoint's): a trained
    run's ckpt.pt there was replaced by a model at its initialisation (a hunt)."""
    from safety_net.checkpoint import load_checkpoint
    folder = os.path.join(work_dir, name)
    path = os.path.join(folder, "ckpt.pt")
    if os.path.exists(path) and load_checkpoint(path, mmap=True).get("source") != shape_source(name):
        raise UserError(f"{folder} holds a checkpoint that --shapes={name} did not write: it would be replaced "
                        f"(fix: another --work_dir)")


def cpu_model():
    """This machine's CPU as lscpu names it, with what decides fp32 decoding speed here, e.g. 'AMD EPYC (family 25,
    model 17; AVX-512, no AMX; 2 CPUs)'."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:   # no lscpu (not Linux)
        out = ""
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in out.splitlines())}
    name = fields.get("Model name") or platform.processor() or "unknown CPU"
    if not out:
        return name
    flags = fields.get("Flags", "").split()
    avx512 = "AVX-512" if "avx512f" in flags else "no AVX-512"
    amx = "AMX" if "amx_tile" in flags else "no AMX"
    return (f"{name} (family {fields.get('CPU family', '?')}, model {fields.get('Model', '?')}; {avx512}, {amx}; "
            f"{os.cpu_count()} CPUs)")


def timed_subprocess(command, threads):
    """(tokens/s of `command` as it reports on stderr ('N tokens in T s (R tokens/s)'), the text it prints)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise UserError(f"{' '.join(command)} failed: {last_line(done.stderr)} (fix: run it alone)")
    line = [line for line in done.stderr.splitlines() if "tokens/s" in line][-1]
    text = done.stdout.split("\n" + SEPARATOR + "\n")[0]
    return float(line.split("(")[-1].split()[0]), text   # the split took the newline end() prints, not the text's


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no message"


def export_program(out_dir, pte, quantize):
    done = subprocess.run([sys.executable, "-m", "tools.executorch.export", f"--out_dir={out_dir}", f"--pte={pte}",
                           f"--quantize={quantize}"], capture_output=True, text=True)
    if done.returncode:
        raise UserError(f"exporting {out_dir} failed: {last_line(done.stderr)} "
                        f"(fix: run python -m tools.executorch.export --out_dir={out_dir} alone)")


def compiled_run(model, prompt, max_new_tokens, threads):
    """(seconds, new ids) of one greedy generation by tools/fast_sample.py's compiled step, in this process."""
    from tools.fast_sample import generate
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = generate(model, torch.tensor([prompt]), max_new_tokens, temperature=0)
    return time.perf_counter() - t0, out[0, len(prompt):].tolist()


def agreement(texts, reference):
    """'same' for each runtime whose greedy text is sample.py's, else where it parts from it."""
    parts = []
    for name, text in texts.items():
        n = next((i for i, (a, b) in enumerate(zip(text, reference)) if a != b), min(len(text), len(reference)))
        parts.append(f"{name} same" if text == reference else f"{name} parts at char {n} of {len(reference)}")
    return "; ".join(parts)


def recorded_dataset(ckpt):
    """(meta.json, its path) of the dataset a checkpoint records; one line when it records none."""
    from tools.huggingface.convert import checkpoint_meta
    meta, source = checkpoint_meta(ckpt)
    if meta is None:
        raise UserError(f"{ckpt['path']} records no dataset, so its tokenizer is unknown (fix: a checkpoint "
                        f"written by train.py)")
    return meta, source


def check_start(start, out_dirs, shapes, data_dir):
    """--start in every model's vocabulary, before anything is written (it was checked after the exports, minutes
    later; a hunt)."""
    from safety_net.checkpoint import load_checkpoint
    from safety_net.dataset import load_meta
    from safety_net.tokenizers import encode_start, tokenizer_from_meta
    for out_dir in out_dirs:
        meta, _ = recorded_dataset(load_checkpoint(out_dir, mmap=True))
        encode_start(tokenizer_from_meta(meta), start, out_dir)
    if shapes:
        encode_start(tokenizer_from_meta(load_meta(data_dir)), start, data_dir)


def prepare(out_dir, cfg, have_llamacpp):
    """(model, tokenizer, {runtime: weights file MB, or why it has none}, {runtime: command(threads)}) of a
    checkpoint, every file written (programs: tools.executorch.export; GGUF: tools.llamacpp.export)."""
    from safety_net.checkpoint import load_model
    from safety_net.tokenizers import tokenizer_from_meta
    from tools.huggingface import ConversionError
    from tools.llamacpp import export as gguf_export
    model, ckpt = load_model(out_dir, "cpu")
    meta, source = recorded_dataset(ckpt)
    name = os.path.basename(os.path.normpath(out_dir))
    common = [f"--start={cfg['start']}", f"--max_new_tokens={cfg['max_new_tokens']}"]
    fp32_mb = model.get_num_params(non_embedding=False) * 4 / 1e6
    sizes = {"sample.py": fp32_mb, "compiled": fp32_mb}
    greedy = ["--temperature=0", *common]
    commands = {"sample.py": Command(["sample.py", f"--out_dir={out_dir}", "--num_samples=1", "--device=cpu"], greedy)}
    if model.config.think_steps:   # no static cache holds its memory (tools/executorch/export.py)
        sizes.update(dict.fromkeys(RUNTIMES[1:5], "Deep Thinking: no static cache"))
    else:
        commands["compiled"] = None   # runs in this process
        for quantize, runtime in zip(QUANTIZE, RUNTIMES[2:5]):
            pte = os.path.join(cfg["work_dir"], f"{name}-{quantize}.pte")
            if not (cfg["reuse"] and os.path.isfile(pte)):
                export_program(out_dir, pte, quantize)
            sizes[runtime] = os.path.getsize(pte) / 1e6
            commands[runtime] = Command(["-m", "tools.executorch.run", f"--pte={pte}"], greedy)
    for qtype, runtime in zip(GGUF_TYPES, RUNTIMES[5:]):
        path = os.path.join(cfg["work_dir"], f"{name}-{qtype}.gguf")
        try:
            if not (cfg["reuse"] and os.path.isfile(path)):
                gguf_export.write_gguf(model, path, qtype, meta, source, say=lambda m: print(m, file=sys.stderr))
        except ConversionError as e:
            sizes[runtime] = f"no GGUF: {str(e).split(':')[0].replace('cannot export ', '')}"
            continue
        sizes[runtime] = os.path.getsize(path) / 1e6
        if have_llamacpp:
            commands[runtime] = Command(["-m", "tools.llamacpp.run", f"--gguf={path}"], common)   # greedy
    return model, tokenizer_from_meta(meta), sizes, commands


class Command:
    """A runtime's command line with n threads (--num_threads=n between `args` and `options`), for its own process."""

    def __init__(self, args, options):
        self.args = args
        self.options = options

    def __call__(self, threads):
        return [sys.executable, *self.args, f"--num_threads={threads}", *self.options]


def measure(model, prompt, commands, threads, cfg):
    """({runtime: best tokens/s}, {runtime: text}, seconds of the compiled decoder's first run or None) with
    `threads` threads: --repeats rounds, each running every runtime once."""
    best = {}
    texts = {}
    compile_s = None
    if "compiled" in commands:
        # dynamo compiles GPT.forward (the decode step) at most 8 times in a process (its recompile_limit); a new model
        # or thread count recompiles it, so each starts afresh
        torch._dynamo.reset()
        compile_s, _ = compiled_run(model, prompt, cfg["max_new_tokens"], threads)   # compiles (timed apart)
    for _ in range(cfg["repeats"]):
        for runtime in RUNTIMES:
            if runtime not in commands:
                continue
            if runtime == "compiled":
                seconds, texts[runtime] = compiled_run(model, prompt, cfg["max_new_tokens"], threads)
                speed = cfg["max_new_tokens"] / seconds
            else:
                speed, texts[runtime] = timed_subprocess(commands[runtime](threads), threads)
            best[runtime] = max(best.get(runtime, 0.0), speed)
    return best, texts, compile_s


def speed_cell(speed, size):
    """'tokens/s (GB/s)', or why there is no speed."""
    if isinstance(size, str):
        return size
    if speed is None:
        return "no llama_cpp"   # the only runtime with a file and no command
    return f"{speed:.0f} ({size * speed / 1000:.1f})"


def ratio_cell(best, slower, faster):
    if slower not in best or faster not in best:
        return "-"
    return f"{best[faster] / best[slower]:.2f}x"


def run(cfg):
    from safety_net.build import load_variant
    from safety_net.fileio import check_out_dir
    from safety_net.sampling import read_prompt
    from safety_net.tokenizers import encode_start
    # FILE:path read as sample.py and the runners read it (the compiled run took it as text; a hunt)
    start = read_prompt(cfg["start"])
    for key in ("max_new_tokens", "repeats"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise UserError(f"--{key} must be a positive integer, got {cfg[key]!r} (fix: e.g. --{key}={DEFAULTS[key]})")
    threads, shapes = cfg["num_threads"], cfg["shapes"]
    if not threads or not all(type(n) is int and n > 0 for n in threads):
        raise UserError(f"--num_threads must be positive integers separated by commas, got {threads!r} "
                        f"(fix: e.g. --num_threads=1,2)")
    out_dirs = [str(d) for d in cfg["out_dirs"]]
    if not shapes and not out_dirs:
        raise UserError("no models (fix: --shapes=llama_10m,mobilellm_125m and/or --out_dirs=out)")
    if cfg["data_dir"] and not shapes:   # accepted and read by nothing (a hunt)
        raise UserError("--data_dir gives --shapes their vocabulary, and --out_dirs' checkpoints have their own "
                        "(fix: drop --data_dir)")
    data_dir = cfg["data_dir"] or "data/shakespeare_char"
    if importlib.util.find_spec("executorch") is None:
        raise UserError("executorch is not installed (fix: pip install -r requirements-dev.txt)")
    for shape in shapes:
        if shape != "llama_10m":
            load_variant(shape)   # an unknown name: one line, before anything is written
        check_shape_folder(shape, cfg["work_dir"])
    check_out_dir(cfg["work_dir"], key="work_dir")   # a file, or not writable: one line, before any export
    check_start(start, out_dirs, shapes, data_dir)
    have_llamacpp = importlib.util.find_spec("llama_cpp") is not None
    os.makedirs(cfg["work_dir"], exist_ok=True)
    out_dirs = [shape_checkpoint(s, data_dir, cfg["work_dir"], cfg["reuse"]) for s in shapes] + out_dirs
    header = ["model", "threads", *RUNTIMES, *(f"{slow} / {fast}" for slow, fast in RATIOS)]
    print(f"CPU: {cpu_model()}; torch {torch.__version__}\n")
    print("tokens/s (GB/s of weights) on that CPU; the last columns: how many times faster the second runtime is\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header), flush=True)
    summary = []
    for out_dir in out_dirs:
        model, tok, sizes, commands = prepare(out_dir, cfg, have_llamacpp)
        name = os.path.basename(os.path.normpath(out_dir))
        prompt = encode_start(tok, start, name)   # a character the vocabulary lacks: one line (a traceback)
        compile_s = None
        agree = ""
        for n in threads:
            best, texts, seconds = measure(model, prompt, commands, n, cfg)
            compile_s = seconds if compile_s is None else compile_s
            row = [name, str(n)] + [speed_cell(best.get(r), sizes[r]) for r in RUNTIMES]
            row += [ratio_cell(best, slow, fast) for slow, fast in RATIOS]
            print("| " + " | ".join(row) + " |", flush=True)   # each row as soon as it is measured
            if not agree:
                reference = texts.pop("sample.py")
                texts = {r: start + tok.decode(t) if r == "compiled" else t for r, t in texts.items()}
                agree = agreement(texts, reference)
        summary.append((name, model, sizes, compile_s, agree))
    print_sizes(summary)


def print_sizes(summary):
    # the compiled decoder's column: the fp32 weights (sample.py's too), then each file's size
    header = ["model", "params", "fp32 weights MB", *(f"{r} MB" for r in RUNTIMES[2:]), "compile s",
              "greedy text vs sample.py"]
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, model, sizes, compile_s, agree in summary:
        cells = [name, f"{model.get_num_params(non_embedding=False) / 1e6:.2f}M"]
        cells += [sizes[r] if isinstance(sizes[r], str) else f"{sizes[r]:.2f}" for r in RUNTIMES[1:]]
        cells += ["-" if compile_s is None else f"{compile_s:.0f}", agree]
        print("| " + " | ".join(cells) + " |")


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:])
