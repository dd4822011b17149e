"""torch.compile, bf16 autocast and checkpoint portability: what can be proven without a GPU.

Compile: for every architecture family a compiled training step gives the loss of the eager step, and a
steady loop (train steps with optimizer updates, evaluation forwards in between, as train.py runs them)
compiles nothing new after its warm-up. Graphs are counted by a backend that wraps the real one (dynamo
calls the backend once per graph: each first compile, each recompile, each piece of a graph break).
The default suite traces with backend="aot_eager" (dynamo + AOTAutograd: graph capture, guards, functional
backward; no code generation, seconds per model). The cases marked `slow` use inductor, train.py's
backend, on CUDA when there is one: about a minute per model on a CPU (C++ compilation), so they run with
`pytest -m slow tests/test_compile.py`.
"""
import copy
import dataclasses
import os
import sys
import types

import pytest
import torch

from model import GPT, GPTConfig
from tools import fast_sample
from tools.fast_sample import compiled_decode_step
from tools.torch_internals import inductor_config, inductor_loaded_modules
from safety_net import checkpoint
from test_model import FLAGS, make_model, tokens
from test_train import run

# one model per architecture family (tiny sizes of tests/test_model.py)
FAMILIES = {
    "plain": FLAGS["gpt"],
    "pgpt": FLAGS["pgpt"],
    "lgpt": FLAGS["lgpt"],
    "cgpt_k3": FLAGS["cgpt_k3"],
    "layer_sharing": FLAGS["repeat2"],
    "shishulm": FLAGS["shishu"],
    "enhanced_residual": FLAGS["enhanced_residual"],
    "deep_thinking": FLAGS["deep_thinking"],
    "gqa_rope": dict(n_head=4, n_kv_head=2, pos_embedding="rope"),
    "post_norm_mix": dict(norm_placement="post", norm_eps=0.1, pos_embedding="rope", rope_base=500.0, mlp_ratio=2.0,
                          head_bias=True, embd_factor_dim=8, share_group_size=2, share_sublayers="attn",
                          enhanced_residual=True, residual_logit_init=1.0),
    "shishu_bottom_top": dict(FLAGS["shishu_bottom_top"], mlp_hidden=24),
}
DEFAULT_SUITE = ("plain", "gqa_rope", "deep_thinking")   # aot_eager, seconds each
# the families the static-cache decoder (tools/fast_sample.py) is checked on (tests/test_support.py reads it)
STATIC_DECODE = ("plain", "cgpt_k3", "shishulm", "pgpt", "gqa_rope", "post_norm_mix", "shishu_bottom_top")
SLOW_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The default suite's aot_eager tests build two layers, the slow inductor proofs tests/test_model.py's four. Dynamo
# unrolls the loop over the layers, so tracing time grows with the depth (four layers: about twice two's), while a
# second layer already runs every path a later one does (a layer after the first, with its own weights and guards).
# ShishuLM keeps its four: its layers 3 and 4 are the MLP-only, shared ones.
DEFAULT_LAYERS = 2


class GraphCounter:
    """A torch.compile backend that counts the graphs dynamo hands it and compiles them with `backend`."""

    def __init__(self, backend):
        self.backend = torch._dynamo.lookup_backend(backend)
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.backend(gm, example_inputs)


def family_model(family, device="cpu", n_layer=None):
    """The family's tiny model; n_layer=DEFAULT_LAYERS: the default suite's depth (ShishuLM keeps its own)."""
    flags = dict(FAMILIES[family])
    if n_layer is not None and family != "shishulm":
        flags["n_layer"] = n_layer
    return make_model("gpt", **flags).to(device)


def compiled_vs_eager(family, backend, device, n_layer=None, steps=6, eval_every=2):
    """Losses of the same AdamW steps (and eval forwards) on an eager model and a compiled copy; the number
    of graphs after the warm-up (first train step + first eval) and at the end."""
    torch._dynamo.reset()
    eager = family_model(family, device, n_layer).train()
    twin = copy.deepcopy(eager)
    counter = GraphCounter(backend)
    compiled = torch.compile(twin, backend=counter)
    losses = {"eager": [], "compiled": []}
    data = tokens(4, 17, seed=3).to(device)
    x, y = data[:, :-1], data[:, 1:]
    evals = tokens(4, 17, seed=4).to(device)
    graphs_after_warmup = None
    for name, model, runner in (("eager", eager, eager), ("compiled", twin, compiled)):
        opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), device)
        for step in range(steps):
            _, loss = runner(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
            if step % eval_every == 0:   # train.py's evaluate(): eval mode, no grad
                model.eval()
                with torch.no_grad():
                    losses[name].append(runner(evals[:, :-1], evals[:, 1:])[1].item())
                model.train()
            if name == "compiled" and step == 0:
                graphs_after_warmup = counter.graphs
    return losses, graphs_after_warmup, counter.graphs


def check_compile(family, backend, device, rtol, n_layer=None):
    losses, warm, end = compiled_vs_eager(family, backend, device, n_layer)
    torch.testing.assert_close(torch.tensor(losses["compiled"]), torch.tensor(losses["eager"]), rtol=rtol, atol=1e-5)
    assert losses["eager"][-1] < losses["eager"][0]   # the steps did change the weights
    assert warm == 2, f"{warm} graphs for one train and one eval forward: a graph break?"
    assert end == warm, f"recompiled in the steady loop: {warm} graphs after warm-up, {end} at the end"


@pytest.mark.parametrize("family", DEFAULT_SUITE)
def test_compile_matches_eager_without_recompiling(family):
    check_compile(family, "aot_eager", "cpu", rtol=1e-5, n_layer=DEFAULT_LAYERS)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_inductor_compile_matches_eager_without_recompiling(family):
    if SLOW_DEVICE == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False   # fp32 on both sides; TF32 would differ from eager
    check_compile(family, "inductor", SLOW_DEVICE, rtol=1e-4 if SLOW_DEVICE == "cpu" else 1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("family, mode", [("plain", "frozen"), ("cgpt_k3", "frozen"), ("gqa_rope", "frozen"),
                                          ("plain", "quick")])
def test_compiled_static_decode_same_tokens(family, mode):
    """tools/fast_sample.py: the compiled single-token step over a static cache (inductor; CUDA graphs on
    CUDA) gives the greedy tokens of the eager path, with one graph for two generate calls and re-priming.
    On the CPU the frozen step multiplies with inductor's own GEMM kernels, the quick one with none, and
    neither leaves inductor's config changed."""
    torch._dynamo.reset()
    model = family_model(family, SLOW_DEVICE)
    prompt = tokens(2, 3).to(SLOW_DEVICE)
    eager = model.generate(prompt, 40, temperature=0.0)
    counter = GraphCounter("inductor")
    compiled_decode_step(model, backend=counter, mode=mode)   # inductor, counted (generate then reuses it)
    templates = torch._dynamo.utils.counters["inductor"]["cpp_templated_kernel_counter"]
    assert torch.equal(fast_sample.generate(model, prompt, 40, temperature=0.0), eager)
    assert torch.equal(fast_sample.generate(model, prompt, 40, temperature=0.0), eager)
    assert counter.graphs == 1
    if SLOW_DEVICE == "cpu":
        gemms = torch._dynamo.utils.counters["inductor"]["cpp_templated_kernel_counter"] - templates
        assert (gemms > 0) == (mode == "frozen"), f"{gemms} GEMM kernels of inductor's template in {mode} mode"
    assert not torch._inductor.config.freezing and not torch._inductor.config.max_autotune


def test_inductor_compiles_a_one_layer_decoder():
    """The default suite's one compile with inductor, through the real path of tools/fast_sample.py (its quick
    CPU mode, the private torch internals of tools/torch_internals.py): a one-layer model's greedy tokens are
    the eager ones, and inductor's global config is as before. About 25 s on a busy 2-core machine the first
    time, a few seconds once inductor's on-disk cache holds the graph; a torch release that moves an internal
    fails here, not only under -m slow."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, vocab_size=37, block_size=16)).eval()
    prompt = tokens(1, 3)
    eager = model.generate(prompt, 6, temperature=0.0)
    modules = len(inductor_loaded_modules())
    assert torch.equal(fast_sample.generate(model, prompt, 6, temperature=0.0, compile_mode="quick"), eager)
    assert len(inductor_loaded_modules()) > modules   # inductor compiled it (its loaded modules grew)
    assert not inductor_config().cpp_wrapper   # the quick mode's setting was patched, then restored


def test_inductor_loaded_modules_is_the_live_list():
    """tools/fast_sample.py takes inductor_loaded_modules() before a compile and reads the modules loaded since
    from it afterwards (to_huge_pages of a frozen graph's weights): a copy never shows them (a hunt: a changed line
    did this, and no test failed). No compile: a module appended to inductor's list shows in the list taken
    before."""
    from torch._inductor.codecache import PyCodeCache
    modules = inductor_loaded_modules()
    loaded = len(modules)
    sentinel = types.ModuleType("not_compiled")
    PyCodeCache.modules.append(sentinel)
    try:
        assert modules[loaded:] == [sentinel]
    finally:
        PyCodeCache.modules.remove(sentinel)


@pytest.mark.parametrize("family", STATIC_DECODE)
def test_static_cache_decode_same_tokens_and_one_graph(family):
    """The static cache (gpt-fast layout) decodes the tokens of the plain path, and its step compiles to one
    graph that serves every step, the re-primed windows and a second generate call (aot_eager here)."""
    torch._dynamo.reset()
    model = family_model(family, n_layer=DEFAULT_LAYERS)
    prompt = tokens(2, 3)
    counter = GraphCounter("aot_eager")
    compiled_decode_step(model, backend=counter)
    for temperature, top_k in ((0.0, None), (1.0, 5)):
        g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
        plain = model.generate(prompt, 40, temperature, top_k, use_kv_cache=False, generator=g1)   # 2 re-primes
        static = fast_sample.generate(model, prompt, 40, temperature, top_k, generator=g2)
        assert torch.equal(static, plain)
    assert counter.graphs == 1


def test_compiled_decode_checks_guards_on_the_first_step_of_each_window():
    """fast_sample.generate skips dynamo's guards after the first compiled step that follows each prime (they
    cost ~0.2 ms a step on a CPU). A call that needs another graph (another batch size) still gets it on its first
    step, the later steps pick the right one of the two, the re-primes of a full window (plain forwards) run with
    the guards on, and no skipping leaks out of generate."""
    from torch._dynamo import eval_frame   # eval_frame._stance: the stance now (set_stance replaces it)
    torch._dynamo.reset()
    model = family_model("plain", n_layer=DEFAULT_LAYERS)
    counter = GraphCounter("aot_eager")
    compiled_decode_step(model, backend=counter)
    primes_unchecked = []
    forward = model.forward
    def watched_forward(idx, *args, **kwargs):
        if idx.size(1) > 1:   # a prime: the prompt or a re-primed window
            primes_unchecked.append(eval_frame._stance.skip_guard_eval_unsafe)
        return forward(idx, *args, **kwargs)
    model.forward = watched_forward
    n_new = 2 * model.config.block_size   # re-primes the window at least twice
    for batch in (2, 1, 2):
        prompt = tokens(batch, 3, seed=batch)
        plain = model.generate(prompt, n_new, 1.0, 5, use_kv_cache=False, generator=torch.Generator().manual_seed(1))
        primes_unchecked.clear()
        static = fast_sample.generate(model, prompt, n_new, 1.0, 5, generator=torch.Generator().manual_seed(1))
        assert torch.equal(static, plain)
        assert len(primes_unchecked) >= 3 and not any(primes_unchecked)
        assert not eval_frame._stance.skip_guard_eval_unsafe
    assert counter.graphs == 2


def test_to_huge_pages_moves_the_tensors_in_place():
    """fast_sample.to_huge_pages moves the tensors a compiled module keeps (the frozen weights) into one buffer,
    2 MB-aligned (huge pages, Linux): the same tensor objects, the same values, a shared tensor moved once."""
    module = types.ModuleType("compiled")
    module.weight = torch.randn(3, 5)
    module.table = torch.arange(7)
    module.same_weight = module.weight
    weight, values = module.weight, {"weight": module.weight.clone(), "table": module.table.clone()}
    fast_sample.to_huge_pages([module])
    assert module.weight is weight and module.same_weight is weight
    assert torch.equal(module.weight, values["weight"]) and torch.equal(module.table, values["table"])
    if sys.platform == "linux":
        assert module.weight.untyped_storage().data_ptr() == module.table.untyped_storage().data_ptr()
        assert module.weight.data_ptr() % 2 ** 21 == 0


def test_static_cache_refuses_deep_thinking():
    model = make_model("deep_thinking")
    with pytest.raises(ValueError, match="static cache does not support Deep Thinking"):
        fast_sample.StaticCache(model.config)


def test_static_cache_reset_starts_a_fresh_sequence():
    """A static cache reused for a new window (generate's re-prime, tools/fast_sample.py) gives the uncached
    logits: positions restart at 0, and cgpt's causal conv window starts from zeros again."""
    model = make_model("cgpt_k3")
    cache = fast_sample.StaticCache(model.config)
    first, second = tokens(1, 10), tokens(1, 10, seed=2)
    with torch.no_grad():
        model(first[:, :6], cache=cache)
        for t in range(6, 9):
            model(first[:, t:t + 1], cache=cache)
        cache.reset()
        torch.testing.assert_close(model(second[:, :6], cache=cache, all_logits=True)[0],
                                   model(second[:, :6], all_logits=True)[0])
        torch.testing.assert_close(model(second[:, 6:7], cache=cache)[0][:, -1], model(second[:, :7])[0][:, -1])


def test_fast_sample_generate_keeps_model_generates_contract():
    """fast_sample.generate as model.generate: the greedy tokens of a block_size-1 model (each window re-primed
    from its last token), the model left in the mode it came in, and use_kv_cache=False one line, as there is no
    decode step to compile (a hunt: changed lines gave an IndexError, left a training model in eval mode and
    sampled with the cache anyway, and no test failed). The eager backend: dynamo's tracing, no compile."""
    from safety_net.configurator import UserError
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, vocab_size=37, block_size=1)).eval()
    compiled_decode_step(model, backend="eager")
    prompt = torch.zeros((1, 1), dtype=torch.long)
    assert torch.equal(fast_sample.generate(model, prompt, 4, temperature=0.0),
                       model.generate(prompt, 4, temperature=0.0))
    with pytest.raises(UserError, match="--no_kv_cache has no decode step to compile"):
        fast_sample.generate(model, prompt, 4, temperature=0.0, use_kv_cache=False)
    torch._dynamo.reset()
    model = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, vocab_size=37, block_size=16, dropout=0.1)).train()
    compiled_decode_step(model, backend="eager")
    fast_sample.generate(model, tokens(1, 3), 5, temperature=0.0)
    assert model.training and all(m.training for m in model.modules())


def test_fast_sample_generate_after_the_model_or_autocast_changes():
    """The same model generating again after a change between calls: pgpt narrowed to one branch (keep_branch, as
    tools.bench --keep_heaviest_branch does) gives model.generate's tokens of that branch, not the skipped-guard
    step of both branches; and a bf16-autocast call between fp32 ones gets a cache of its own dtype rather than a
    RuntimeError on buffers of the other (a hunt: a changed line did each, and no test failed). Eager backend."""
    torch._dynamo.reset()
    torch.manual_seed(0)   # (at n_embd=16 both branches and one give the same greedy tokens: nothing to tell apart)
    model = GPT(GPTConfig(n_layer=2, n_embd=32, n_head=2, vocab_size=37, block_size=16, n_branches=2,
                          tie_embeddings=False)).eval()
    prompt = tokens(1, 3)
    compiled_decode_step(model, backend="eager")
    both = model.generate(prompt, 10, temperature=0.0)
    assert torch.equal(fast_sample.generate(model, prompt, 10, temperature=0.0), both)
    model.keep_branch = 0
    one = model.generate(prompt, 10, temperature=0.0)
    assert not torch.equal(one, both)   # the change shows in the tokens
    assert torch.equal(fast_sample.generate(model, prompt, 10, temperature=0.0), one)
    model.keep_branch = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fast_sample.generate(model, prompt, 5, temperature=0.0).shape == (1, 8)
    assert torch.equal(fast_sample.generate(model, prompt, 5, temperature=0.0),
                       model.generate(prompt, 5, temperature=0.0))


# --- bf16 autocast on the CPU ----------------------------------------------------------------------

def test_bfloat16_autocast_trains_on_cpu(tiny_train_config):
    losses = []
    summary = run(dict(tiny_train_config, dtype="bfloat16", max_iters=30, eval_interval=15, lr_decay_iters=30),
                  callback=lambda event, info: losses.append(info["loss"].item()) if event == "iter" else None)
    assert len(losses) == 30 and all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    evals = [e["val_loss"] for e in summary["evals"]]
    assert evals[-1] < evals[0] - 0.5 and all(torch.isfinite(torch.tensor(evals)))


def test_each_training_run_compiles_afresh(tiny_train_config, monkeypatch):
    """compare.py trains several models in one process. Dynamo keeps a limited number of graphs per function
    (8; lowered to 4 here), so without train.py's reset per run a later model would fall back to eager:
    here pgpt (train, eval and heaviest-branch graphs) after gpt's two."""
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real_compile(model, backend="eager", **kw))
    # config.patch restores the limit on exit; pytest's monkeypatch.setattr cannot undo dynamo's config module
    # (pytest 9.2 leaves the attribute deleted, and every later compile test fails)
    with torch._dynamo.config.patch(recompile_limit=4):
        for i, model_keys in enumerate([{}, dict(n_branches=2, tie_embeddings=False)]):
            out_dir = f"{tiny_train_config['out_dir']}{i}"
            run(dict(tiny_train_config, compile=True, max_iters=2, eval_interval=2, out_dir=out_dir, **model_keys))
            frames = torch._dynamo.utils.counters["frames"]   # cleared by each run's reset
            assert frames["ok"] == frames["total"] > 0, dict(frames)


# --- checkpoints from compiled / DDP models, and from CUDA ------------------------------------------

def test_train_py_compile_writes_plain_checkpoints(tiny_train_config, monkeypatch):
    """train.py --compile=True saves the weights of the raw model: no '_orig_mod.' keys, loads anywhere. One layer:
    the keys' names are the question, and tracing a second layer would only take longer."""
    one_layer = dict(tiny_train_config, n_layer=1)
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real_compile(model, backend="aot_eager", **kw))
    torch._dynamo.reset()
    summary = run(dict(one_layer, compile=True, max_iters=4, eval_interval=2))
    ckpt = checkpoint.load_checkpoint(summary["out_dir"])
    assert not [k for k in ckpt["model"] if k.startswith(("_orig_mod.", "module."))]
    model, _ = checkpoint.load_model(summary["out_dir"], "cpu")
    assert model.config.n_embd == one_layer["n_embd"] and model.config.n_layer == 1
    resumed = run(dict(one_layer, compile=False, max_iters=6, eval_interval=2, init_from="resume"))
    assert resumed["iter_num"] == 6


def test_ddp_and_compile_prefixes_are_stripped_on_load(tmp_path):
    """A state_dict taken from DDP(torch.compile(model)) (keys 'module._orig_mod.…') loads into a plain GPT."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    model = make_model("gqa")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        wrapped = DistributedDataParallel(torch.compile(model, backend="aot_eager"))
        state = wrapped.state_dict()
    finally:
        dist.destroy_process_group()
    assert all(k.startswith("module._orig_mod.") for k in state)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": state, "model_args": dataclasses.asdict(model.config)}, path)
    loaded, _ = checkpoint.load_model(str(path), "cpu")
    idx = tokens(2, 8)
    assert torch.equal(loaded(idx, all_logits=True)[0], model(idx, all_logits=True)[0])


def save_as_if_on_cuda(obj, path, monkeypatch):
    """torch.save `obj` with every storage tagged 'cuda:0', byte for byte what a CUDA run writes for the
    same values (torch.save records each storage's bytes plus its device tag)."""
    with monkeypatch.context() as m:
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(obj, path)


def test_resume_on_cpu_of_a_checkpoint_written_on_cuda(tiny_train_config, tmp_path, monkeypatch):
    """What a CPU machine can show: a checkpoint whose tensors are tagged cuda:0 and whose optimizer/config
    say CUDA (fused AdamW, bf16, a CUDA RNG state) resumes on the CPU, and sample/eval's loader reads it.
    Not shown here: that a real GPU writes these tags (torch.save records each storage's device; no test of this
    repository runs on a GPU)."""
    first = run(dict(tiny_train_config, max_iters=4, eval_interval=2))
    out_dir = first["out_dir"]
    path = os.path.join(out_dir, checkpoint.LAST_NAME)
    ckpt = torch.load(path, weights_only=False)
    for group in ckpt["optimizer"]["param_groups"]:
        group["fused"] = True          # train.py uses fused AdamW on CUDA
    ckpt["config"].update(device="cuda", dtype="bfloat16")
    ckpt["rng"]["cuda"] = torch.ByteTensor(16)
    save_as_if_on_cuda(ckpt, path, monkeypatch)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=False)   # the tags are real: without map_location this fails
    model, _ = checkpoint.load_model(path, "cpu")
    assert next(model.parameters()).device.type == "cpu"
    resumed = run(dict(tiny_train_config, max_iters=8, eval_interval=2, init_from="resume"))
    assert resumed["iter_num"] == 8 and torch.isfinite(torch.tensor(resumed["final_val_loss"]))
    assert resumed["final_val_loss"] < first["evals"][0]["val_loss"]


def test_fast_sample_prints_the_text_of_sample_py(tmp_path, monkeypatch, capsys):
    """python -m tools.fast_sample (the compiled static-cache step; aot_eager here instead of inductor) prints the
    text of sample.py's eager KV-cache path for the same seed, several samples long enough to re-prime the window."""
    import sample
    from test_sample import make_checkpoint
    out_dir = make_checkpoint(tmp_path, block_size=16)
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real_compile(fn, backend="aot_eager", fullgraph=True))
    torch._dynamo.reset()
    texts = {}
    for command in (sample, fast_sample):
        command.main([f"--out_dir={out_dir}", "--start=To be", "--num_samples=2", "--max_new_tokens=40",
                      "--device=cpu"])
        texts[command] = capsys.readouterr().out
    assert texts[fast_sample] == texts[sample] and len(texts[sample]) > 80


def test_fast_sample_refuses_what_it_cannot_compile(tmp_path, capsys):
    """--no_kv_cache (nothing to compile) and an unknown --compile_mode before loading, and Deep Thinking (its memory is not in the static
    cache): one line each, naming sample.py."""
    from test_sample import make_checkpoint
    with pytest.raises(SystemExit, match="error: --no_kv_cache .*python sample.py"):
        fast_sample.main([f"--out_dir={tmp_path / 'missing'}", "--no_kv_cache", "--device=cpu"])
    with pytest.raises(SystemExit, match="error: --compile_mode must be one of quick, frozen, got 'fast'"):
        fast_sample.main([f"--out_dir={tmp_path / 'missing'}", "--compile_mode=fast", "--device=cpu"])
    # on a GPU the step is a CUDA graph: --compile_mode=quick was ignored there (a hunt); refused before loading
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fast_sample, "setup_sampling", lambda cfg: (torch.device("cuda"), torch.float32, "x", []))
        with pytest.raises(SystemExit, match="error: --compile_mode=quick chooses inductor's settings on a CPU"):
            fast_sample.main([f"--out_dir={tmp_path / 'missing'}", "--compile_mode=quick"])
    out_dir = make_checkpoint(tmp_path, think_steps=2)
    with pytest.raises(SystemExit, match="error: .*Deep Thinking.*python sample.py"):
        fast_sample.main([f"--out_dir={out_dir}", "--max_new_tokens=2", "--num_samples=1", "--device=cpu"])
