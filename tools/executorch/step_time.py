"""
The time of one decode step on the same weights, side by side in one process: the model's linear layers alone
(eager torch: every weight read once, nothing else, by MKL's GEMV, a reference and not a bound: other kernels read
the weights faster), the compiled decoder's step (tools/fast_sample.py), an ExecuTorch program's step and llama.cpp's.
Prints a markdown table.

    python -m tools.executorch.step_time --out_dir=bench/llama_10m --pte=bench/llama_10m-none.pte \\
        --gguf=bench/llama_10m-f32.gguf      # --pte=a.pte,b.pte: several programs (before/after a change)

(--gguf needs the llama_cpp package: pip install llama-cpp-python.)

Each round runs --steps decode steps of every runtime in turn, at the same positions (after a --prime-token
prompt); a step's time is the round's CPU time of this process / steps (one thread everywhere: CPU time leaves
out the time other jobs hold the core, which a busy shared machine makes most of the noise), and the table gives
the best and the median round.
"""
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from safety_net.configurator import UserError, run_command

DEFAULTS = dict(
    out_dir="",             # the checkpoint
    pte="",                 # its ExecuTorch programs, comma-separated (python -m tools.executorch.export); "" = none
    gguf="",                # its GGUF file (python -m tools.llamacpp.export), f32; "" = none
    prime=64,               # tokens before the timed steps
    steps=128,              # decode steps a round
    rounds=5,
)


class LinearChain:
    """Every Linear of a model (and a tied head) once on one token, in module order: the weights a decode step
    reads, through eager torch's kernels (MKL's GEMV on a CPU), and nothing else."""

    def __init__(self, model):
        self.weights = [(m.weight, m.bias) for m in model.modules() if isinstance(m, nn.Linear)]
        if model.config.tie_embeddings:
            self.weights.append((model.tok_emb.wte.weight, None))
        self.inputs = [torch.randn(1, 1, w.size(1)) for w, _ in self.weights]

    def new_round(self, prime_ids):
        pass

    def step(self, pos):
        for (w, b), x in zip(self.weights, self.inputs):
            F.linear(x, w, b)


class CompiledDecoder:
    """tools/fast_sample.py's static cache and compiled decode step."""

    def __init__(self, model, prime_ids):
        from tools.fast_sample import compiled_decode_step, static_cache
        self.model = model
        self.compiled = compiled_decode_step(model)   # first: its one-line refusal (Deep Thinking; a traceback)
        self.cache = static_cache(model, 1)
        self.token = torch.tensor([prime_ids[-1:]])
        self.new_round(prime_ids)
        for _ in range(3):   # compiles
            self.step(0)

    def new_round(self, prime_ids):
        self.cache.reset()
        self.model(torch.tensor([prime_ids]), cache=self.cache)

    def step(self, pos):
        self.compiled(self.token, self.cache)


class ProgramDecoder:
    """An ExecuTorch program's prefill and decode methods (tools/executorch/run.py's Program)."""

    def __init__(self, pte, positions):
        from tools.executorch.run import Program
        self.program = Program(pte)
        self.token = torch.tensor([[1]])
        if positions > self.program.max_len:   # checked against --out_dir's block_size only: a traceback (a hunt)
            raise UserError(f"{pte}: --prime + --steps = {positions} exceeds its window of {self.program.max_len} "
                            f"positions (fix: fewer --steps, or the program exported from --out_dir's checkpoint)")

    def new_round(self, prime_ids):
        self.program.prefill(prime_ids)

    def step(self, pos):
        self.program.decode_method.execute([self.token, torch.tensor([pos])])


class LlamaCppDecoder:
    """llama.cpp through llama_cpp (tools/llamacpp/run.py's settings: f32 keys and values), one thread."""

    def __init__(self, path):
        from tools.llamacpp.run import load
        self.llm = load(path, num_threads=1)

    def new_round(self, prime_ids):
        self.llm.reset()
        self.llm.eval(prime_ids)

    def step(self, pos):
        self.llm.eval([1])


def run(cfg):
    from safety_net.checkpoint import load_model
    for key in ("prime", "steps", "rounds"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise UserError(f"--{key} must be a positive integer, got {cfg[key]!r} (fix: e.g. --{key}={DEFAULTS[key]})")
    if cfg["gguf"]:   # before anything is built: --gguf needs the optional llama_cpp package
        from tools.llamacpp.run import require_llama_cpp
        require_llama_cpp()
    torch.set_num_threads(1)
    model, _ = load_model(cfg["out_dir"], "cpu")
    if cfg["prime"] + cfg["steps"] > model.config.block_size:
        block = model.config.block_size   # the fix fits it: "fewer --steps" could not, past a --prime of 64 (an audit)
        raise UserError(f"--prime + --steps = {cfg['prime'] + cfg['steps']} exceeds block_size {block} (fix: e.g. "
                        f"--prime={max(1, block // 4)} --steps={max(1, block // 2)})")
    prime_ids = [i % model.config.vocab_size for i in range(cfg["prime"])]
    weights_mb = 4 * sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)) / 1e6
    runtimes = {}
    with torch.inference_mode():
        runtimes["linear layers alone (eager torch)"] = LinearChain(model)
        programs = {}   # loaded and checked first: the compiled decoder takes half a minute to compile
        if cfg["pte"]:
            from tools.torch_internals import executorch_set_threads
            executorch_set_threads(1)
        for pte in filter(None, cfg["pte"].split(",")):
            programs[f"ExecuTorch {os.path.basename(pte)} step"] = ProgramDecoder(pte, cfg["prime"] + cfg["steps"])
        runtimes["compiled decoder step"] = CompiledDecoder(model, prime_ids)
        runtimes.update(programs)
        if cfg["gguf"]:
            runtimes["llama.cpp step"] = LlamaCppDecoder(cfg["gguf"])
        times = {name: [] for name in runtimes}
        for _ in range(cfg["rounds"]):
            for name, runtime in runtimes.items():
                runtime.new_round(prime_ids)
                t0 = time.process_time()
                for pos in range(cfg["prime"], cfg["prime"] + cfg["steps"]):
                    runtime.step(pos)
                times[name].append(1e3 * (time.process_time() - t0) / cfg["steps"])
    reference = min(times.get("llama.cpp step", [0.0]))
    print(f"ms of CPU a decode step at positions {cfg['prime']}-{cfg['prime'] + cfg['steps'] - 1}, one thread, "
          f"{cfg['rounds']} rounds; {weights_mb:.1f} MB of Linear weights (fp32)\n")
    print("| what | best round ms | median ms | GB/s of Linear weights (best) | / llama.cpp (best) |")
    print("|---|---|---|---|---|")
    for name, ms in times.items():
        ratio = f"{min(ms) / reference:.2f}x" if reference else "-"
        print(f"| {name} | {min(ms):.3f} | {statistics.median(ms):.3f} | {weights_mb / min(ms):.1f} | {ratio} |")


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
