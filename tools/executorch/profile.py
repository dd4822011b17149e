"""
Where an ExecuTorch program's decode step spends its time, per operator, from ExecuTorch's own event tracer
(ETDump, read back with executorch.devtools.Inspector): the operators XNNPACK runs inside its delegate, those that
run outside it as ExecuTorch kernels (portable or optimized: "native" below), and the overheads around them.
Prints a markdown table. With --out_dir instead, the same for the compiled decoder (tools/fast_sample.py), from
torch.profiler with inductor's kernel profile on: the matmuls it calls, its generated kernels, its wrapper.

    python -m tools.executorch.profile --pte=model.pte --num_threads=1 > profile.md
    python -m tools.executorch.profile --out_dir=out                   # the compiled decoder on the checkpoint

It runs `decode` at positions 0 .. steps-1 (a new sequence one token at a time; --steps=0: the whole window,
every fill level of the cache once) with a fixed token, so it needs no tokenizer and no model code. The tracer
adds a little time to every event; shares are what to read, not absolute speed (tools.executorch.bench
measures that).
"""
import os
import re
import sys
import tempfile

if __name__ == "__main__":
    os.environ["MKL_NUM_THREADS"] = "1"   # before torch loads MKL, as in tools/executorch/run.py (why: there)

import torch

from safety_net.configurator import UserError, run_command

DEFAULTS = dict(
    pte="model.pte",        # the program (python -m tools.executorch.export)
    out_dir="",             # a checkpoint: profile the compiled decoder on it instead of a program
    steps=0,                # decode steps; 0 = every position of the window once (--out_dir: positions 1 ..
                            # block_size - 1, after a prime)
    num_threads=1,          # XNNPACK's threadpool; 0 is taken as 1
)
# the events that enclose others: a step (Method::execute), a delegate call (XNNPACK's operators inside it),
# an instruction that calls a kernel (the kernel's native_call_* event inside it)
ENCLOSING = ("Method::execute", "DELEGATE_CALL", "OPERATOR_CALL")


def event_totals(etdump_path):
    """{event name: (number of runs, total ms)} over every event the tracer recorded while executing."""
    from executorch.devtools import Inspector
    totals = {}
    for block in Inspector(etdump_path=etdump_path).event_blocks:
        if block.name != "Execute":   # the other block times loading the methods
            continue
        for event in block.events:
            if event.perf_data is not None:
                runs, total = totals.get(event.name, (0, 0.0))
                totals[event.name] = (runs + len(event.perf_data.raw), total + sum(event.perf_data.raw))
    return totals


def operator_rows(totals, steps):
    """[(operator, where, calls a step, ms a step)], largest first, with the time outside any operator: XNNPACK's
    delegate calls around its operators, ExecuTorch's instructions around the kernels, the method around both.
    XNNPACK's numbered instances of one operator ("... #2") are summed."""
    xnnpack = {}
    native = {}
    for name, (n, ms) in totals.items():
        if name in ENCLOSING:
            continue
        if name.startswith("native_call_"):
            table = native
            key = name[len("native_call_"):]
        elif "::" in name:   # a kernel registered outside the portable/optimized sets: llama::custom_sdpa
            table = native
            key = name
        else:
            table = xnnpack
            key = re.sub(r" #\d+$", "", name)
        runs, total = table.get(key, (0, 0.0))
        table[key] = (runs + n, total + ms)
    rows = [(key, "XNNPACK", n / steps, ms / steps) for key, (n, ms) in xnnpack.items()]
    rows += [(key, "native", n / steps, ms / steps) for key, (n, ms) in native.items()]
    delegate_n, delegate_ms = totals.get("DELEGATE_CALL", (0, 0.0))
    call_n, call_ms = totals.get("OPERATOR_CALL", (0, 0.0))
    step_ms = totals["Method::execute"][1]
    inside_xnnpack = sum(ms for _, ms in xnnpack.values())
    inside_native = sum(ms for _, ms in native.values())
    rows += [("(XNNPACK delegate call, outside its operators)", "XNNPACK", delegate_n / steps,
              (delegate_ms - inside_xnnpack) / steps),
             ("(instruction around a native kernel)", "native", call_n / steps, (call_ms - inside_native) / steps),
             ("(the method, outside delegate calls and instructions)", "ExecuTorch", 1,
              (step_ms - delegate_ms - call_ms) / steps)]
    return sorted(rows, key=lambda row: -row[3])


def decode_events(pte, steps, num_threads):
    """(event_totals of `steps` decode steps of the program at `pte` (0: max_len), steps)."""
    from tools.executorch.run import load_kernels
    from tools.torch_internals import executorch_load, executorch_set_threads
    load_kernels()
    executorch_set_threads(num_threads)
    try:   # max_len from a load without the tracer, so that the tracer records decode steps only
        max_len = executorch_load(pte).run_method("max_len", ())[0]
        module = executorch_load(pte, enable_etdump=True, debug_buffer_size=0)
    except (RuntimeError, ValueError) as e:
        raise UserError(f"cannot load {pte} as an ExecuTorch program ({str(e).splitlines()[0]}) "
                        f"(fix: write it with python -m tools.executorch.export)") from None
    steps = steps or max_len
    if steps > max_len:
        raise UserError(f"--steps={steps} exceeds the program's window of {max_len} (fix: --steps={max_len})")
    for pos in range(steps):
        module.run_method("decode", (torch.tensor([[0]]), torch.tensor([pos])))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "decode.etdp")
        module.write_etdump_result_to_file(path)
        return event_totals(path), steps


def profile(pte, steps, num_threads):
    """Markdown lines: the operator table of `steps` decode steps of the program at `pte`."""
    totals, steps = decode_events(pte, steps, num_threads)
    step_ms = totals["Method::execute"][1] / steps
    lines = [f"`{os.path.basename(pte)}`: {steps} decode steps at positions 0-{steps - 1}, {num_threads} thread(s); "
             f"{step_ms:.3f} ms a step under the tracer", "",
             "| operator | runs in | calls a step | ms a step | share of the step |", "|---|---|---|---|---|"]
    for name, where, calls, ms in operator_rows(totals, steps):
        lines.append(f"| {name} | {where} | {calls:g} | {ms:.3f} | {100 * ms / step_ms:.1f}% |")
    return lines


def profile_compiled(out_dir, steps):
    """Markdown lines: the compiled decoder's decode steps at positions 1 .. steps (0: to the end of the window),
    after one eager token at position 0 (as generate primes), under torch.profiler, per event, by self time."""
    from safety_net.checkpoint import load_model
    from tools.fast_sample import compiled_decode_step, static_cache
    from tools.torch_internals import inductor_config
    model, _ = load_model(out_dir, "cpu")
    if model.config.block_size < 2:   # no decode step: every token re-primes (an inductor traceback; a hunt)
        raise UserError(f"{out_dir}: block_size {model.config.block_size} leaves no position for a decode step "
                        f"after the prime (fix: a model of block_size 2 or more)")
    steps = steps or model.config.block_size - 1
    if steps >= model.config.block_size:
        raise UserError(f"--steps={steps} does not fit block_size {model.config.block_size} after one token "
                        f"(fix: --steps={model.config.block_size - 1})")
    step = compiled_decode_step(model)   # first: its one-line refusal (Deep Thinking; a traceback)
    cache = static_cache(model, 1)
    token = torch.zeros(1, 1, dtype=torch.long)
    # the generated kernels appear as events; inductor's global setting, restored after
    with inductor_config().patch({"cpp.enable_kernel_profile": True}), torch.inference_mode():
        for compiling in (True, False):
            cache.reset()
            model(token, cache=cache)   # the prime, eager: makes the cache's buffers
            if compiling:
                step(token, cache)
                continue
            with torch.profiler.profile() as prof:
                for _ in range(steps):
                    step(token, cache)
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    lines = [f"compiled decoder on `{out_dir}`: {steps} decode steps at positions 1-{steps}, 1 thread; "
             f"{total / 1e3 / steps:.3f} ms a step under the profiler", "",
             "| event | calls a step | ms a step (self) | share of the step |", "|---|---|---|---|"]
    for e in events[:20]:
        lines.append(f"| {e.key[:80]} | {e.count / steps:g} | {e.self_cpu_time_total / 1e3 / steps:.3f} | "
                     f"{100 * e.self_cpu_time_total / total:.1f}% |")
    return lines


def run(cfg, explicit):
    from safety_net.runtime import check_num_threads
    check_num_threads(cfg["num_threads"])
    unread = sorted(explicit & {"pte", "num_threads"}) if cfg["out_dir"] else []
    if unread:   # the compiled decoder's profile reads neither: they changed nothing (a hunt)
        raise UserError(f"--{unread[0]} goes with a program; --out_dir profiles the compiled decoder, on 1 thread "
                        f"(fix: drop --{unread[0]}, or drop --out_dir to profile the program)")
    if not isinstance(cfg["steps"], int) or cfg["steps"] < 0:
        raise UserError(f"--steps must be an integer >= 0, got {cfg['steps']!r} (fix: e.g. --steps=100)")
    if cfg["out_dir"]:
        torch.set_num_threads(1)
        print("\n".join(profile_compiled(cfg["out_dir"], cfg["steps"])))
        return
    if not os.path.isfile(cfg["pte"]):
        raise UserError(f"no program at {cfg['pte']} (fix: python -m tools.executorch.export --pte={cfg['pte']})")
    torch.set_num_threads(max(1, cfg["num_threads"]))
    print("\n".join(profile(cfg["pte"], cfg["steps"], max(1, cfg["num_threads"]))))


def main(argv=None):
    return run_command(run, DEFAULTS, argv, with_explicit=True)


if __name__ == "__main__":
    main(sys.argv[1:])
