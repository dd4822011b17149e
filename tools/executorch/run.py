"""
Generate text from an ExecuTorch program with ExecuTorch's runtime only: no model code of this repository, just
the .pte (tools/executorch/export.py) and the tokenizer file beside it.

    python -m tools.executorch.run --pte=model.pte --start="War is " --max_new_tokens=200
    python -m tools.executorch.run --pte=model.pte --temperature=0          # greedy

It samples as sample.py does (the same window re-priming at max_len, the same draws from a torch.Generator seeded
with --seed), so with an fp32 program it prints the text sample.py prints for the same options. The text appears
as it is generated (a multi-byte character once all its bytes are there); Ctrl-C stops it there, exit code 130.
"""
import faulthandler
import hashlib
import json
import os
import signal
import struct
import sys
import time

if __name__ == "__main__":
    # Before torch loads MKL. ExecuTorch's attention kernel (custom_sdpa) runs its matmuls with the MKL of the
    # torch it links, from every thread of its own pool, and MKL's OpenMP team in each of them oversubscribes the
    # cores: an 8-bit program ran at a third of its one-thread speed on two. ExecuTorch's pool is the parallelism.
    os.environ["MKL_NUM_THREADS"] = "1"

import torch

from safety_net.configurator import UserError, run_command
from safety_net.runtime import quiet_stderr
from safety_net.tokenizers import GPT2_EOT

DEFAULTS = dict(   # a key sample.py has too takes its default there
    pte="model.pte",        # the program; its tokenizer is <name>.tokenizer.json beside it
    tokenizer="",           # "" = the one beside the program
    start="\n",             # prompt text, or FILE:path (sample.py's --start)
    num_samples=10,
    max_new_tokens=500,
    temperature=0.8,        # 0 = greedy
    top_k=200,              # 0 = the whole vocabulary
    seed=1337,
    num_threads=0,          # threads of ExecuTorch's pool (XNNPACK, attention); 0 = the runtime's default
)
SEPARATOR = "---------------"
EXTENDED_HEADER_END = 40        # the flatbuffer's root offset and identifier, then eh00 and four sizes


def load_kernels():
    """Register ExecuTorch's LLM kernels (llama::update_cache, llama::custom_sdpa: the programs' attention) with
    its runtime. They ship in the executorch package, beside its runtime; no model code comes with them."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401


class Program:
    """The two methods of an exported program and its constants (tokenizer_id: None for a program exported before
    the export stored it)."""

    def __init__(self, path):
        check_program_file(path)   # before the library: a file that is no program is one line alone
        with quiet_stderr():   # its import and CPU probe wrote ~8 lines before any error line (an exploration)
            methods = self.load(path)
        self.prefill_method, self.decode_method = methods["prefill"], methods["decode"]
        self.max_len, self.vocab_size, self.eot_token = (
            methods[name].execute([])[0] for name in ("max_len", "vocab_size", "eot_token"))
        self.tokenizer_id = methods["tokenizer_id"].execute([])[0] if "tokenizer_id" in methods else None

    def load(self, path):
        """{name: method} of the program at path (held in self.program), with one-line errors."""
        from executorch.runtime import Runtime, Verification
        load_kernels()
        fix = f"(fix: export it again: python -m tools.executorch.export --pte={path})"
        try:   # InternalConsistency: the runtime checks the whole flatbuffer before it reads it
            program = Runtime.get().load_program(path, verification=Verification.InternalConsistency)
        except (RuntimeError, ValueError) as e:
            raise UserError(f"cannot load {path} as an ExecuTorch program ({str(e).splitlines()[0]}) {fix}") from None
        self.program = program   # holds the program's bytes: its methods read them while they run
        methods = {}
        for name in ("prefill", "decode", "max_len", "vocab_size", "eot_token", "tokenizer_id"):
            try:   # by name: program.method_names decodes every name, and a damaged one aborts the process
                methods[name] = program.load_method(name)
            except (KeyError, RuntimeError, ValueError) as e:
                if name != "tokenizer_id":
                    raise UserError(f"{path} has no loadable method {name} ({str(e).splitlines()[0]}): not a "
                                    f"program of tools.executorch.export, or a damaged one {fix}") from None
        return methods

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


def sampled(program, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None, n_tokens=None):
    """Yield max_new_tokens tokens sampled after ids, each as soon as it is drawn (the runner prints it). When the
    window is full (max_len tokens) the newest max_len // 2 are prefilled again from position 0, as
    model.generate does; only the window is kept, so a long run holds no more than max_len + 1 ids. n_tokens:
    only ids below it (a tokenizer smaller than the model's padded vocabulary), as model.generate's."""
    window, prime = list(ids), True
    for _ in range(max_new_tokens):
        if len(window) > program.max_len:
            window, prime = window[-max(1, program.max_len // 2):], True
        if prime:
            logits, prime = program.prefill(window), False
        else:
            logits = program.decode(window[-1], len(window) - 1)
        token = sample_next(logits[:n_tokens], temperature, top_k, generator)
        window.append(token)
        yield token


def generate(program, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """ids + max_new_tokens sampled tokens."""
    return list(ids) + list(sampled(program, ids, max_new_tokens, temperature, top_k, generator))


def load_tokenizer(path):
    from tokenizers import Tokenizer   # Hugging Face tokenizers: what ExecuTorch's own tokenizer package wraps
    try:
        return Tokenizer.from_file(path)
    except Exception as e:   # the tokenizers library raises plain Exceptions
        raise UserError(f"cannot read the tokenizer {path} ({str(e).splitlines()[0]}) "
                        f"(fix: export again; the tokenizer is written beside the .pte)") from None


def check_program_file(path):
    """One line for a file that is not a whole ExecuTorch program, before the runtime reads it (it aborts the
    process on some): the flatbuffer's identifier ET.. at byte 4, and the sizes its extended header (eh00 at byte
    8) gives for the program and its segments within the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(EXTENDED_HEADER_END)
    fix = f"(fix: export it again: python -m tools.executorch.export --pte={path})"
    if len(head) < 8 or head[4:6] != b"ET":
        raise UserError(f"{path} is not an ExecuTorch program (no ET identifier at byte 4) {fix}")
    if head[8:12] == b"eh00" and len(head) == EXTENDED_HEADER_END:
        _, program_size, segment_base, segment_size = struct.unpack_from("<IQQQ", head, 12)
        end = max(program_size, segment_base + segment_size if segment_size else 0)
        if end > size:
            raise UserError(f"{path} is cut short: its header gives {end:,} bytes, the file has {size:,} {fix}")


def probe_program(path):
    """Load `path` and run each method once in a forked child first: ExecuTorch's runtime aborts (SIGABRT) or
    crashes (SIGSEGV) on some damaged programs instead of raising (a flipped byte in a method's name suffices),
    and a child's crash is one line here. A child that only raises leaves the error to the real load. Call it
    before this process starts threads (the tokenizer, XNNPACK's pool): a forked child gets none of them."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:   # the child: its own crash is the answer; it says nothing (the parent speaks)
        code = 1
        try:
            faulthandler.disable()   # e.g. pytest's: it would print the expected crash
            os.environ["GGML_NO_BACKTRACE"] = "1"   # llama.cpp's, if loaded, would run gdb on it first (seconds)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            program = Program(path)
            program.decode(int(program.prefill([0]).argmax()), 1)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        raise UserError(f"{path} crashes ExecuTorch's runtime ({name} while loading and running it): the file is "
                        f"damaged (fix: export it again: python -m tools.executorch.export --pte={path})")


def vocabulary_id(tokenizer):
    """A 60-bit number of a tokenizer's vocabulary (every token and its id): the export stores it in the program as
    the constant tokenizer_id, and the runner compares it with the tokenizer it is given."""
    pairs = sorted((i, token) for token, i in tokenizer.get_vocab(with_added_tokens=True).items())
    return int(hashlib.sha256(json.dumps(pairs).encode("utf-8")).hexdigest()[:15], 16)


def tokenizer_path(pte):
    """model.pte -> model.tokenizer.json: the runner finds the tokenizer beside the program."""
    return os.path.splitext(pte)[0] + ".tokenizer.json"


def check_pair(program, tokenizer, pte, path):
    """One line unless the tokenizer is the program's: the one exported with it (its tokenizer_id), or for an older
    program one whose ids fit its vocabulary and end-of-text. Another model's tokenizer would print other text."""
    fix = (f"(fix: use the tokenizer exported with it, {tokenizer_path(pte)}, or export again: python -m "
           f"tools.executorch.export --pte={pte})")
    if program.tokenizer_id is not None and program.tokenizer_id != vocabulary_id(tokenizer):
        raise UserError(f"{path} is not the tokenizer {pte} was exported with (another vocabulary) {fix}")
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    eot = vocab.get(GPT2_EOT, -1)   # its name in a BPE tokenizer.json
    if max(vocab.values()) >= program.vocab_size or eot != program.eot_token:
        raise UserError(f"{path} does not fit {pte}: its ids go to {max(vocab.values())} and its end-of-text is "
                        f"{eot}, the program has {program.vocab_size} tokens and end-of-text {program.eot_token} "
                        f"{fix}")


def encode(tokenizer, text, eot_token):
    try:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
    except Exception as e:   # e.g. a character the char-level vocabulary lacks (WordLevel has no unknown token)
        unknown = sorted(set(text) - set(tokenizer.get_vocab()))   # a char-level vocabulary's tokens: its characters
        if unknown:   # named, as sample.py names them
            raise UserError(f"characters not in the vocabulary: {', '.join(repr(ch) for ch in unknown)} (fix: remove "
                            f"them from --start)") from None
        raise UserError(f"cannot encode --start ({str(e).splitlines()[0]}) (fix: change --start)") from None
    if not ids:
        if eot_token < 0:
            raise UserError("--start is empty (fix: give at least one character, e.g. --start=\"\\n\")")
        ids = [eot_token]
    return ids


def run(cfg):
    from safety_net.sampling import check_sampling_options, read_prompt
    from safety_net.tokenizers import TextStream
    from tools.huggingface.tokenizer import TokenBytes
    check_sampling_options(cfg)   # sample.py's checks and messages
    start = read_prompt(cfg["start"])   # the text, or FILE:path's, as sample.py reads it
    if not os.path.isfile(cfg["pte"]):
        raise UserError(f"no program at {cfg['pte']} (fix: python -m tools.executorch.export --pte={cfg['pte']})")
    check_program_file(cfg["pte"])   # one line, before the child loads ExecuTorch for nothing
    probe_program(cfg["pte"])   # first: the child must not inherit threads
    # torch only samples here (one small vector a token); its OpenMP threads would spin on the cores of
    # ExecuTorch's pool between steps
    torch.set_num_threads(1)
    if cfg["num_threads"] > 0:
        from tools.torch_internals import executorch_set_threads
        with quiet_stderr():   # ExecuTorch's import (Program)
            executorch_set_threads(cfg["num_threads"])
    path = cfg["tokenizer"] or tokenizer_path(cfg["pte"])
    tokenizer = load_tokenizer(path)
    program = Program(cfg["pte"])
    check_pair(program, tokenizer, cfg["pte"], path)
    start_ids = encode(tokenizer, start, program.eot_token)
    generator = torch.Generator().manual_seed(cfg["seed"])
    t0, n_new = time.perf_counter(), 0
    stream = TextStream(token_bytes=TokenBytes(tokenizer))
    n_tokens = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1   # its ids: 0 .. n_tokens - 1
    for _ in range(cfg["num_samples"]):
        stream.write(start)   # the prompt as given; then each token as it comes (Ctrl-C: exit 130)
        for token in sampled(program, start_ids, cfg["max_new_tokens"], cfg["temperature"], cfg["top_k"],
                             generator, n_tokens):
            stream.add_token(token)
            n_new += 1
        stream.end()
        print(SEPARATOR, flush=True)
    dt = time.perf_counter() - t0
    print(f"{n_new} tokens in {dt:.2f}s ({n_new / max(dt, 1e-9):.1f} tokens/s)", file=sys.stderr)


def main(argv=None):
    return run_command(run, DEFAULTS, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
