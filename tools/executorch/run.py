"""
Generate text from an ExecuTorch program with ExecuTorch's runtime only: no model code of this repository, just
the .pte (tools/executorch/export.py) and the tokenizer file beside it.

    python -m tools.executorch.run --pte=model.pte --start="War is " --max_new_tokens=200
    python -m tools.executorch.run --pte=model.pte --temperature=0          # greedy

It samples as sample.py does (the same window re-priming at max_len, the same draws from a torch.Generator seeded
with --seed), so with an fp32 program it prints the text sample.py prints for the same options.
"""
import sys
import time

import torch

from configurator import UserError, run_command

DEFAULTS = dict(
    pte="model.pte",        # the program; its tokenizer is <name>.tokenizer.json beside it
    tokenizer="",           # "" = the one beside the program
    start="\n",             # prompt text
    num_samples=1,
    max_new_tokens=200,
    temperature=0.8,        # 0 = greedy
    top_k=200,              # 0 = the whole vocabulary
    seed=1337,
    num_threads=0,          # threads of XNNPACK's pool and torch's sampling ops; 0 = the runtime's default
)
SEPARATOR = "---------------"


def load_kernels():
    """Register ExecuTorch's LLM kernels (llama::update_cache, llama::custom_sdpa: the programs' attention) with
    its runtime. They ship in the executorch package, beside its runtime; no model code comes with them."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401


class Program:
    """The two methods of an exported program and its constants."""

    def __init__(self, path):
        from executorch.runtime import Runtime
        load_kernels()
        try:
            program = Runtime.get().load_program(path)
        except (RuntimeError, ValueError) as e:
            raise UserError(f"cannot load {path} as an ExecuTorch program ({str(e).splitlines()[0]}) "
                            f"(fix: write it with python -m tools.executorch.export)") from None
        if not {"prefill", "decode", "max_len"} <= program.method_names:
            raise UserError(f"{path} has methods {sorted(program.method_names)}, not prefill/decode/max_len "
                            f"(fix: write it with python -m tools.executorch.export)")
        self.program = program   # holds the program's bytes: its methods read them while they run
        self.prefill_method, self.decode_method = program.load_method("prefill"), program.load_method("decode")
        self.max_len, self.vocab_size, self.eot_token = (
            program.load_method(name).execute([])[0] for name in ("max_len", "vocab_size", "eot_token"))

    def prefill(self, ids):
        """Logits (V,) after a new sequence of ids (positions 0..len-1)."""
        return self.prefill_method.execute([torch.tensor([ids], dtype=torch.long)])[0][0, -1]

    def decode(self, token, pos):
        """Logits (V,) after one more token at position pos."""
        return self.decode_method.execute([torch.tensor([[token]], dtype=torch.long),
                                           torch.tensor([pos], dtype=torch.long)])[0][0, -1]


def sample_next(logits, temperature, top_k, generator):
    """The next token from logits (V,): model.sample_next's draw (greedy at 0; else top-k and the race of p_i / E_i,
    E_i ~ Exp(1), which picks token i with probability p_i), written out here because the runner imports no
    model code."""
    if temperature == 0:
        return int(logits.argmax())
    logits = logits.float()[None] / temperature
    if top_k and top_k < logits.size(-1):
        logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[:, [-1]], float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return int(torch.argmax(probs / torch.empty_like(probs).exponential_(generator=generator)))


def generate(program, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """ids + max_new_tokens sampled tokens. When the window is full (max_len tokens) the newest max_len // 2 are
    prefilled again from position 0, as model.generate does."""
    ids, window_start, prime = list(ids), 0, True
    for _ in range(max_new_tokens):
        if len(ids) - window_start > program.max_len:
            window_start, prime = len(ids) - max(1, program.max_len // 2), True
        if prime:
            logits, prime = program.prefill(ids[window_start:]), False
        else:
            logits = program.decode(ids[-1], len(ids) - 1 - window_start)
        ids.append(sample_next(logits, temperature, top_k, generator))
    return ids


def load_tokenizer(path):
    from tokenizers import Tokenizer   # Hugging Face tokenizers: what ExecuTorch's own tokenizer package wraps
    try:
        return Tokenizer.from_file(path)
    except Exception as e:   # the tokenizers library raises plain Exceptions
        raise UserError(f"cannot read the tokenizer {path} ({str(e).splitlines()[0]}) "
                        f"(fix: export again; the tokenizer is written beside the .pte)") from None


def encode(tokenizer, text, eot_token):
    try:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
    except Exception as e:   # e.g. a character the char-level vocabulary lacks (WordLevel has no unknown token)
        raise UserError(f"cannot encode --start ({str(e).splitlines()[0]}) (fix: change --start)") from None
    if not ids:
        if eot_token < 0:
            raise UserError("--start is empty (fix: give at least one character, e.g. --start=\"\\n\")")
        ids = [eot_token]
    return ids


def run(cfg):
    import os
    from checkpoint import check_num_threads, check_seed
    from configurator import check_temperature
    from dataset import render
    from tools.executorch.export import tokenizer_path
    if cfg["num_samples"] < 1 or cfg["max_new_tokens"] < 0 or cfg["top_k"] < 0:
        raise UserError("--num_samples must be >= 1, --max_new_tokens and --top_k >= 0 "
                        "(fix: e.g. --num_samples=1 --max_new_tokens=500 --top_k=200)")
    check_temperature(cfg["temperature"])
    check_seed(cfg["seed"])
    check_num_threads(cfg["num_threads"])
    if not os.path.isfile(cfg["pte"]):
        raise UserError(f"no program at {cfg['pte']} (fix: python -m tools.executorch.export --pte={cfg['pte']})")
    if cfg["num_threads"] > 0:
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        _unsafe_reset_threadpool(cfg["num_threads"])
        torch.set_num_threads(cfg["num_threads"])
    tokenizer = load_tokenizer(cfg["tokenizer"] or tokenizer_path(cfg["pte"]))
    program = Program(cfg["pte"])
    start_ids = encode(tokenizer, cfg["start"], program.eot_token)
    generator = torch.Generator().manual_seed(cfg["seed"])
    t0, n_new = time.perf_counter(), 0
    for _ in range(cfg["num_samples"]):
        ids = generate(program, start_ids, cfg["max_new_tokens"], cfg["temperature"], cfg["top_k"], generator)
        n_new += len(ids) - len(start_ids)
        print(render(tokenizer, cfg["start"], start_ids, ids))
        print(SEPARATOR, flush=True)
    dt = time.perf_counter() - t0
    print(f"{n_new} tokens in {dt:.2f}s ({n_new / max(dt, 1e-9):.1f} tokens/s)", file=sys.stderr)


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
