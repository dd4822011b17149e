"""The GPU path on a CUDA device (`pytest -m gpu`: part 1 of `python -m tools.gpu_check`), then
tools.gpu_check itself (its dry run, its budget, its report) in the default run.

The `gpu` tests need CUDA and are skipped without it (tests/conftest.py). GPU_TESTS_ON_CPU=1 runs
them on the CPU instead: a rehearsal of their code, where "CUDA" is the CPU again (minutes: the
inductor compiles). They run where a GPU differs from the CPU: other kernels (cuBLAS, SDPA's flash
and memory-efficient attention, inductor's Triton code), bf16 autocast, CUDA graphs, cuda tags.
The leak checks use test_model's weights at std 0.3, as there. Each measured error is appended to
the file GPU_CHECK_RECORD names: tools.gpu_check's report shows each check's worst by its tolerance.

Tolerances, relative to the largest reference logit, TF32 off (fp32 means fp32):
  float64  test_model.NOISE (1e-10): the code paths on CUDA, to rounding
  float32  1e-4 against the CPU or the full forward (the float32 rounding floor was 2.4e-5 on the
           CPU, test_model); 1e-5 between the rows of one batch (they run the same kernels)
  bf16     1e-3 between the rows of one batch; against fp32, 5e-3 of the loss and 5e-2 of the
           gradient's norm (the CPU's bf16 autocast measured 3.6e-5 and 5.5e-3 at most)
"""
import contextlib
import copy
import io
import json
import os
import re
import subprocess
import sys
import time
import types

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from conftest import ROOT, one_error_line, tiny_config, write_token_dataset
from model import GPT, GPTConfig
import variants
from safety_net import checkpoint
from test_compile import GraphCounter, family_model
from test_model import NOISE, VISIBLE, cached_logits, tokens, visible_weights
from test_variants import PRESETS, tiny, tiny_model
from tools import gpu_check

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"   # cpu: only under GPU_TESTS_ON_CPU=1
FP32 = 1e-4
FP32_SAME_BATCH = 1e-5
BF16_SAME_BATCH = 1e-3
BF16_LOSS = 5e-3
BF16_GRAD = 5e-2
# a child's wait of 60 s in short sleeps: Python runs the handler of a signal that came just before a sleep started
# only when that sleep ends
SLEEP_60 = "for _ in range(600):\n    time.sleep(0.1)\n"


def record(check, case, error, tolerance):
    """Append a measured error to tools.gpu_check's record (nothing without GPU_CHECK_RECORD)."""
    path = os.environ.get("GPU_CHECK_RECORD")
    if path:
        with open(path, "a") as f:
            line = dict(check=check, case=case, error=float(error), tolerance=tolerance)
            f.write(json.dumps(line) + "\n")


def relative_error(reference, other):
    """max|reference - other| / max|reference|, in float64 on the CPU."""
    reference, other = reference.detach().double().cpu(), other.detach().double().cpu()
    return ((reference - other).abs().max() / reference.abs().max()).item()


@pytest.fixture(autouse=True)
def exact_float32():
    """fp32 means fp32: no TF32 in matmuls or in cuDNN's convolutions (cgpt); restored after."""
    matmul, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = cudnn


# --- every preset: CUDA's logits and loss are the CPU's ------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", PRESETS)
def test_preset_fp32_logits_on_cuda_match_the_cpu(name):
    model = visible_weights(tiny_model(name))
    twin = copy.deepcopy(model).to(DEVICE)
    data = tokens(2, 17)
    x, y = data[:, :-1], data[:, 1:]
    with torch.no_grad():
        logits, loss = model(x, y)
        cuda_logits, cuda_loss = twin(x.to(DEVICE), y.to(DEVICE))
    error = relative_error(logits, cuda_logits)
    record("fp32 logits, CUDA vs CPU", name, error, FP32)
    assert error <= FP32, f"{name}: CUDA's logits are off the CPU's by {error:.1e} of their scale"
    assert abs(cuda_loss.item() - loss.item()) <= FP32 * loss.item()


# --- causality under the kernels SDPA takes on CUDA ----------------------------------------------

KERNELS = {   # dtype, the one SDPA backend allowed (None: SDPA's choice, the math kernel here)
    "float64": (torch.float64, None),
    "float32-efficient": (torch.float32, SDPBackend.EFFICIENT_ATTENTION),
    "bf16-flash": (torch.bfloat16, SDPBackend.FLASH_ATTENTION),
}
SAME_BATCH = {"float64": NOISE, "float32-efficient": FP32_SAME_BATCH, "bf16-flash": BF16_SAME_BATCH}


def forward_with(model, idx, dtype, backend):
    """Every position's logits, in float64, with only `backend` allowed; bf16 as train.py runs it
    (autocast). A backend that cannot run this model (flash under an explicit mask, a layout it
    lacks) skips the test, naming it."""
    autocasting = contextlib.nullcontext()
    if dtype == torch.float64:
        model = model.double()
    elif dtype == torch.bfloat16:
        autocasting = torch.autocast(DEVICE, dtype=torch.bfloat16)
    kernels = contextlib.nullcontext() if backend is None else sdpa_kernel(backend)
    try:
        with torch.no_grad(), autocasting, kernels:
            return model(idx, all_logits=True)[0].double()
    except RuntimeError as e:   # CUDA's words, then the CPU's
        if "No available kernel" not in str(e) and "No viable backend" not in str(e):
            raise
        pytest.skip(f"{backend.name} does not run this model on {DEVICE} "
                    f"({str(e).splitlines()[0]})")


def kernel_model(name):
    """test_variants.tiny_model with heads that flash and memory-efficient attention can run (head
    sizes multiples of 8, also after lgpt and cgpt halve the width twice), weights at std 0.3."""
    shrinks = variants.load(name).get("shrink_every")
    torch.manual_seed(0)
    model = GPT(GPTConfig(**dict(tiny(name), n_embd=64, n_head=2 if shrinks else 4)))
    with torch.no_grad():
        for p in model.parameters():   # the vectors too (biases, alphas, branch logits)
            if p.dim() < 2:
                p.add_(0.3 * torch.randn_like(p))
    return visible_weights(model).eval()


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", PRESETS)
def test_causal_under_cuda_kernels(name, kernel):
    """test_model.check_causal on the device: at every cut, the tokens after it leave the logits
    before it unchanged (rows of one batch) and change every logit after it (not vacuous)."""
    dtype, backend = KERNELS[kernel]
    model = kernel_model(name).to(DEVICE)
    T, V = model.config.block_size, model.config.vocab_size
    idx = tokens(1, T)[0]
    rows = [idx] + [torch.cat([idx[:i + 1], (idx[i + 1:] + 7) % V]) for i in range(T - 1)]
    logits = forward_with(model, torch.stack(rows).to(DEVICE), dtype, backend).cpu()
    scale = logits[0].abs().max().item()
    moved_before = [(logits[i + 1, :i + 1] - logits[0, :i + 1]).abs().max() for i in range(T - 1)]
    worst = max(moved_before).item()
    tolerance = SAME_BATCH[kernel]
    record(f"causality, {kernel}", name, worst / scale, tolerance)
    assert worst <= tolerance * scale, f"{name}, {kernel}: a later token moved an earlier logit"
    for i in range(T - 1):
        moved = (logits[i + 1, i + 1:] - logits[0, i + 1:]).abs().amax(-1)
        assert (moved > max(VISIBLE, tolerance) * scale).all(), f"cut after {i}: a logit kept"


# --- the KV cache gives the full forward's logits ------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", PRESETS)
def test_kv_cache_equals_full_forward_on_cuda(name, dtype):
    """test_model.check_kv_cache on the device, past a re-primed window: float64 holds the code path
    to rounding, float32 the kernels (the full forward's memory-efficient attention, the steps')."""
    model = visible_weights(tiny_model(name)).to(DEVICE, getattr(torch, dtype))
    seq = tokens(2, model.config.block_size + 6).to(DEVICE)
    tolerance = NOISE if dtype == "float64" else FP32
    worst = 0.0
    with torch.no_grad():
        steps = cached_logits(model, seq, prefill=3)
        for t, start, logits in steps:
            end = max(u for u, s, _ in steps if s == start)
            full = model(seq[:, start:end], all_logits=True)[0]
            worst = max(worst, relative_error(full[:, t - 1 - start], logits))
    record(f"KV cache vs full forward, {dtype}", name, worst, tolerance)
    assert worst <= tolerance, f"{name}: cached decoding is off the full forward by {worst:.1e}"


# --- bf16 autocast -------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", PRESETS)
def test_bf16_autocast_forward_backward_close_to_fp32(name):
    """train.py's bf16 autocast step at init's weights: a finite loss and gradients, near fp32's."""
    model = tiny_model(name).to(DEVICE).train()
    data = tokens(4, 17, seed=5).to(DEVICE)
    x, y = data[:, :-1], data[:, 1:]
    losses, grads = {}, {}
    for dtype in (torch.float32, torch.bfloat16):
        autocasting = contextlib.nullcontext()
        if dtype == torch.bfloat16:
            autocasting = torch.autocast(DEVICE, dtype=torch.bfloat16)
        with autocasting:
            loss = model(x, y)[1]
        loss.backward()
        losses[dtype] = loss.item()
        grads[dtype] = torch.cat([p.grad.flatten() for p in model.parameters()
                                  if p.grad is not None])
        model.zero_grad(set_to_none=True)
    assert torch.isfinite(grads[torch.bfloat16]).all()
    assert torch.isfinite(torch.tensor(losses[torch.bfloat16]))
    loss_error = abs(losses[torch.bfloat16] - losses[torch.float32]) / losses[torch.float32]
    grad_diff = grads[torch.bfloat16] - grads[torch.float32]
    grad_error = (grad_diff.norm() / grads[torch.float32].norm()).item()
    record("bf16 loss vs fp32", name, loss_error, BF16_LOSS)
    record("bf16 gradient vs fp32 (norm)", name, grad_error, BF16_GRAD)
    assert loss_error <= BF16_LOSS and grad_error <= BF16_GRAD, (loss_error, grad_error)


# --- a checkpoint written on CUDA, and sampling on CUDA ------------------------------------------

def run_script(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def train_args(cfg):
    return ["train.py"] + [f"--{key}={value}" for key, value in cfg.items()]


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory):
    """train.py on the device in its dtype (auto: bf16 on CUDA), 4 iterations of a tiny model."""
    tmp = tmp_path_factory.mktemp("cuda_run")
    cfg = tiny_config(write_token_dataset(tmp / "data"), tmp / "out")
    cfg.update(device=DEVICE, dtype="auto", max_iters=4, eval_interval=2)
    result = run_script(*train_args(cfg))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return cfg


@pytest.mark.gpu
def test_checkpoint_written_on_cuda_loads_and_resumes_on_the_cpu(cuda_run):
    out_dir = cuda_run["out_dir"]
    stored = torch.load(os.path.join(out_dir, checkpoint.CKPT_NAME), weights_only=True)
    assert next(iter(stored["model"].values())).device.type == DEVICE   # tagged cuda in the file
    on_cpu, _ = checkpoint.load_model(out_dir, "cpu")
    on_device, _ = checkpoint.load_model(out_dir, DEVICE)
    idx = torch.randint(on_cpu.config.vocab_size, (2, on_cpu.config.block_size),
                        generator=torch.Generator())
    with torch.no_grad():
        error = relative_error(on_cpu(idx, all_logits=True)[0],
                               on_device(idx.to(DEVICE), all_logits=True)[0])
    record("fp32 logits, CUDA's checkpoint on CPU vs CUDA", "a tiny train.py run", error, FP32)
    assert error <= FP32
    resume = dict(cuda_run, device="cpu", dtype="float32", init_from="resume", max_iters=6)
    resumed = run_script(*train_args(resume))
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert re.search(r"^step 6: train loss [\d.]+, val loss [\d.]+$", resumed.stdout, re.M)


@pytest.mark.gpu
def test_fast_sample_on_cuda_prints_the_text_of_sample_py(cuda_run):
    """python -m tools.fast_sample (inductor, CUDA graphs on CUDA) and sample.py, greedy in fp32,
    past two re-primed windows: the same text."""
    args = [f"--out_dir={cuda_run['out_dir']}", f"--device={DEVICE}", "--dtype=float32",
            "--temperature=0", "--num_samples=2", "--max_new_tokens=40", "--start=abc"]
    eager, compiled = run_script("sample.py", *args), run_script("-m", "tools.fast_sample", *args)
    assert eager.returncode == 0, eager.stderr[-2000:]
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    assert compiled.stdout == eager.stdout and len(eager.stdout) > 80


# --- torch.compile with inductor (last: the slowest) ---------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("family", ["plain", "gqa_rope"])
def test_inductor_gives_eager_logits_and_losses_without_recompiling(family):
    """test_compile's check on the device with inductor, train.py's backend: the logits before
    training, then the losses of AdamW steps with evaluations between them; 2 graphs (an
    evaluation, a training step) and no more after."""
    torch._dynamo.reset()
    eager = family_model(family, DEVICE)
    twin = copy.deepcopy(eager)
    counter = GraphCounter("inductor")
    compiled = torch.compile(twin, backend=counter)
    data, evals = tokens(4, 17, seed=3).to(DEVICE), tokens(4, 17, seed=4).to(DEVICE)
    losses, first_logits, graphs_after_warmup = {"eager": [], "compiled": []}, {}, None
    for name, model, runner in (("eager", eager, eager), ("compiled", twin, compiled)):
        optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), DEVICE)
        for step in range(6):
            if step % 2 == 0:   # train.py's evaluation: eval mode, no grad
                model.eval()
                with torch.no_grad():
                    logits, loss = runner(evals[:, :-1], evals[:, 1:])
                first_logits.setdefault(name, logits)
                losses[name].append(loss.item())
                model.train()
            _, loss = runner(data[:, :-1], data[:, 1:])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
            if name == "compiled" and step == 0:
                graphs_after_warmup = counter.graphs
    error = relative_error(first_logits["eager"], first_logits["compiled"])
    record("inductor logits vs eager, fp32", family, error, FP32)
    assert error <= FP32
    torch.testing.assert_close(torch.tensor(losses["compiled"]), torch.tensor(losses["eager"]),
                               rtol=1e-3, atol=1e-5)
    assert losses["eager"][-1] < losses["eager"][1]   # the steps changed the weights
    assert graphs_after_warmup == 2, f"{graphs_after_warmup} graphs for one eval and one step"
    assert counter.graphs == graphs_after_warmup, f"recompiled: {counter.graphs} graphs at the end"


# === tools.gpu_check (its dry run: -m slow) =========================================================

@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """python -m tools.gpu_check --dry_run in this process (its parts are subprocesses), as on a
    machine without CUDA (GPU_TESTS_ON_CPU would run the gpu tests on the CPU: minutes)."""
    tmp = tmp_path_factory.mktemp("gpu_check")
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(printed):
        env.delenv("GPU_TESTS_ON_CPU", raising=False)
        gpu_check.main(["--dry_run", f"--out_dir={tmp / 'out'}", f"--work_dir={tmp / 'work'}"])
    files = sorted(os.listdir(tmp / "out"))
    stem = [f for f in files if f.endswith(".json")][0][:-len(".json")]
    with open(tmp / "out" / f"{stem}.json") as f:
        report = json.load(f)
    with open(tmp / "out" / f"{stem}.md") as f:
        markdown = f.read()
    with open(tmp / "out" / f"{stem}-quickstart.csv") as f:
        log_csv = f.read().splitlines()
    return dict(printed=printed.getvalue(), files=files, stem=stem, report=report,
                markdown=markdown, log_csv=log_csv)


@pytest.mark.slow   # the GPU check's dry run on the CPU: 40 s for its fixture
def test_dry_run_prints_the_plan_and_writes_the_files(dry_run):
    printed, report = dry_run["printed"], dry_run["report"]
    assert "budget 300 s" in printed and "dry run: toy sizes on the CPU" in printed
    total = sum(gpu_check.FULL_S.values())   # the budget is shared as the parts' times in full
    for name, full in gpu_check.FULL_S.items():
        share = round(300 * full / total)
        assert re.search(rf"^{name} +{share} s +~ *{full} s ", printed, re.M), name
    assert report["plan"] == {name: dict(share_s=round(300 * full / total, 1), full_estimate_s=full)
                              for name, full in gpu_check.FULL_S.items()}
    # names a lent machine sends back from $OUT (letters, digits, '.', '_', '-')
    assert re.fullmatch(r"\d{4}-\d\d-\d\d-cpu-dry-run", dry_run["stem"])
    suffixes = (".json", ".md", "-log.txt", "-quickstart.csv")
    assert dry_run["files"] == sorted(dry_run["stem"] + suffix for suffix in suffixes)
    env = report["environment"]
    assert (env["device"], env["torch"]) == ("cpu", torch.__version__)
    assert env["cuda"] == torch.version.cuda
    assert report["peak"]["tflops"] is None and report["wall_s"] < report["budget_s"]
    statuses = {name: part["status"] for name, part in report["parts"].items()}
    assert statuses == dict.fromkeys(gpu_check.PARTS, "ok")
    for name in gpu_check.PARTS:
        assert f"| {name} | ok | {report['parts'][name]['wall_s']:.0f} |" in dry_run["markdown"]


@pytest.mark.slow   # the GPU check's dry run on the CPU: 40 s for its fixture
def test_dry_run_collects_the_gpu_tests_and_they_skip_without_cuda(dry_run):
    part = dry_run["report"]["parts"]["correctness"]
    counts = part["counts"]
    assert counts["SKIPPED"] >= 7 * len(PRESETS)
    assert counts["PASSED"] == counts["FAILED"] == counts["ERROR"] == 0
    assert part["skip_reasons"] == ["gpu: no CUDA device (docs/gpu.md)"] and part["figures"] == []
    assert f"{counts['SKIPPED']} skipped" in part["summary"]


@pytest.mark.slow   # the GPU check's dry run on the CPU: 40 s for its fixture
def test_dry_run_quickstart_figures_are_train_pys(dry_run):
    part = dry_run["report"]["parts"]["quickstart"]
    assert part["full"] and part["iterations"] == part["max_iters"] == 20
    assert [e["iter"] for e in part["evals"]] == [0, 10, 20]
    # the val loss read from train.py's stdout is the one its log.csv holds
    last_eval = [row.split(",") for row in dry_run["log_csv"] if ",eval," in row][-1]
    assert f"{float(last_eval[3]):.4f}" == f"{part['final_val_loss']:.4f}"
    assert part["ms_per_iter"] > 0 and part["nanogpt_val_loss"] == 1.4697
    row = f"| {part['best_val_loss']:.4f} | 1.4697 | {part['final_val_loss']:.4f} | 20 |"
    assert row in dry_run["markdown"]


@pytest.mark.slow   # the GPU check's dry run on the CPU: 40 s for its fixture
def test_dry_run_measures_every_throughput_model_and_decoding_path(dry_run):
    parts = dry_run["report"]["parts"]
    throughput = {i["item"]: i for i in parts["throughput"]["items"]}
    assert list(throughput) == list(gpu_check.THROUGHPUT_ITEMS)
    for name in gpu_check.THROUGHPUT_MODELS:
        item = throughput[name]
        assert item["status"] == "ok" and item["loss_finite"] and item["mfu"] is None, item
        model = GPT(GPTConfig(**gpu_check.throughput_config(name, dry_run=True)))
        assert item["params"] == model.get_num_params(non_embedding=False)
        per_step = item["tokens_per_step"] * 1000 / item["step_ms"]
        assert item["tokens_per_s"] == pytest.approx(per_step)
        assert f"| {name} | {item['shape']} |" in dry_run["markdown"]
    decode = {i["item"]: i for i in parts["decode"]["items"]}
    assert list(decode) == list(gpu_check.DECODE_ITEMS)
    for name, item in decode.items():
        assert item["status"] == "ok" and item["tokens"] == 40, item
        assert name.startswith("diagnose") or item["tokens_per_s"] > 0, item
    assert decode["eager quickstart"]["weights"] == "trained, iteration 20"
    variants = decode["diagnose quickstart"]["variants"]
    assert [label for label, *_ in gpu_check.DIAGNOSE_VARIANTS] == list(variants)[:-1]
    as_sample_py = variants[gpu_check.DIAGNOSE_VARIANTS[0][0]]
    assert as_sample_py["ms_per_token"] > 0 and "error" in variants["SDPA: cuDNN only"]
    assert f"| {gpu_check.DIAGNOSE_VARIANTS[0][0]} | {as_sample_py['ms_per_token']:.2f} |" in dry_run["markdown"]
    assert decode["diagnose quickstart"]["profile"]["cpu_ops"]
    assert decode["sample.py quickstart"]["text_start"].rstrip() in dry_run["markdown"]


# --- the budget: a command cut at its deadline keeps what it printed -----------------------------

class StopWhenStarted:
    """A watch for run_until: the deadline becomes now once the command printed 'started'."""

    def see(self, line, deadline):
        return time.time() if line == "started" else deadline


def test_a_command_past_its_deadline_gets_sigterm_then_sigkill(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "STOP_GRACE_S", 0.5)
    log = str(tmp_path / "log.txt")
    stops = ("import signal, sys, time\ndef stop(*args):\n    print('saving', flush=True)\n"
             "    sys.exit(3)\nsignal.signal(signal.SIGTERM, stop)\nprint('started', flush=True)\n" + SLEEP_60)
    t0 = time.time()
    result = gpu_check.run_until([sys.executable, "-c", stops], t0 + 60, log, StopWhenStarted())
    assert result.cut and result.returncode == 3 and result.lines == ["started", "saving"]
    ignores = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
               "print('started', flush=True)\n" + SLEEP_60)
    result = gpu_check.run_until([sys.executable, "-c", ignores], t0 + 60, log, StopWhenStarted())
    assert result.cut and result.returncode == -9 and result.lines == ["started"]
    assert time.time() - t0 < 10
    with open(log) as f:
        assert f.read().count("the budget ran out: SIGTERM") == 2


def test_the_quickstart_runs_on_only_when_train_pys_eta_fits():
    now = time.time()
    watch = gpu_check.TrainWatch(base_deadline=now + 60, limit=now + 300)
    line = "iter {}: loss 2.0000, lr 1.00e-03, 12.00 ms/iter, 1,365,333 tok/s, eta 0:{:02d}:00"
    assert watch.see(line.format(100, 2), now + 60) == pytest.approx(now + 130, abs=2)   # fits
    assert watch.see(line.format(110, 9), now + 130) == now + 60   # does not: back to its share
    assert watch.see("step 250: train loss 1.9000, val loss 1.9500", now + 60) == now + 60
    assert watch.evals[-1]["val_loss"] == 1.95 and watch.last_iter == 110 and watch.ran_on
    assert watch.ms == [12.0, 12.0] and watch.tok_s == [1365333.0, 1365333.0]


def one_figure(item):
    return dict(value=1)


def test_items_that_do_not_fit_are_recorded_as_skipped(tmp_path):
    record_path = str(tmp_path / "record.jsonl")
    cfg = dict(record=record_path, deadline=time.time() + 10, dry_run=False)
    gpu_check.measure_items(cfg, {"quick": 1, "long": 60}, one_figure)
    items = gpu_check.read_records(record_path)
    assert [(i["item"], i["status"]) for i in items] == [("quick", "ok"), ("long", "skipped")]
    assert items[0]["value"] == 1 and items[1]["reason"].startswith("budget: needs ~60 s")


# --- the card's peak, the models, bad input ------------------------------------------------------

@pytest.mark.parametrize("device, label, tflops", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5), ("NVIDIA H100 PCIe", "H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5), ("NVIDIA H200", "H200 SXM", 989.5),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5),
    ("NVIDIA GeForce RTX 4090", "no peak known for 'NVIDIA GeForce RTX 4090'", None)])
def test_peak_from_the_device_name(device, label, tflops):
    peak = gpu_check.peak_for(device)
    assert (peak["label"], peak["tflops"]) == (label, tflops)


def meta_params(cfg):
    with torch.device("meta"):
        return GPT(GPTConfig(**cfg)).get_num_params(non_embedding=False)


@pytest.mark.parametrize("name", gpu_check.THROUGHPUT_MODELS)
def test_throughput_models_at_full_size(name):
    count = meta_params(gpu_check.throughput_config(name, dry_run=False))
    if name == "gpt2_124m":   # GPT-2 small with its vocabulary padded to 50304, as nanoGPT
        assert count == 50304 * 768 + 1024 * 768 + 12 * (12 * 768 ** 2 + 13 * 768) + 2 * 768
    elif name == "mobilellm_125m":
        assert count == 124_635_456
    else:   # the recipe's model: the preset with the char vocabulary
        assert count == meta_params(dict(variants.load(name), vocab_size=65))


@pytest.mark.parametrize("args, words", [
    (["--parts=correctness,speed"], ("--parts", "speed", "correctness,quickstart,throughput")),
    (["--budget_s=10"], ("--budget_s=10", "30 or more")),
    (["--tag=a/b"], ("--tag=a/b",))])
def test_bad_options_are_one_line_before_anything_is_written(args, words, tmp_path):
    out_dir = tmp_path / "out"
    one_error_line(gpu_check.main, [*args, "--dry_run", f"--out_dir={out_dir}"], *words)
    assert not out_dir.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_only_the_dry_run_runs(tmp_path):
    out_dir = tmp_path / "out"
    one_error_line(gpu_check.main, [f"--out_dir={out_dir}"], "no CUDA device", "--dry_run")
    assert not out_dir.exists()


# --- a hunt's survivors: the budget loop, the options, the parts' statuses, the report -----------

def fake_parts(seen, budget_s):
    """PART_RUNNERS that record their deadline (seconds after the start); throughput's has a bug."""
    def runner(name):
        def run(ctx, deadline, paths):
            seen[name] = round(deadline - (ctx.end - budget_s), 1)
            if name == "throughput":
                raise ValueError("a bug in the part")
            return dict(status="ok", wall_s=0.0)
        return run
    return {name: runner(name) for name in gpu_check.PARTS}


def dry_run_report(tmp_path, monkeypatch, budget_s, *args):
    """main() of a dry run with fake parts: (each part's deadline after the start, the JSON report)."""
    seen = {}
    monkeypatch.setattr(gpu_check, "PART_RUNNERS", fake_parts(seen, budget_s))
    out_dir = tmp_path / f"out-{budget_s}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        gpu_check.main(["--dry_run", f"--out_dir={out_dir}", f"--work_dir={tmp_path / 'work'}",
                        f"--budget_s={budget_s}", *args])
    [path] = out_dir.glob("*.json")
    return seen, json.loads(path.read_text())


def test_each_part_gets_its_share_and_what_earlier_parts_left(tmp_path, monkeypatch):
    """A user's --budget_s=100 gives each part a deadline at the running sum of the shares, the last
    one 5 s before the end for the report; a part with under 10 s is skipped and not started; a part
    with a bug is an "error" and the parts after it still run; the command in the report is as typed.
    (a hunt: a changed line did this, and no test failed)"""
    seen, report = dry_run_report(tmp_path, monkeypatch, 100)
    assert seen == dict(correctness=18.7, quickstart=37.4, throughput=66.1, decode=95.0)
    statuses = {name: part["status"] for name, part in report["parts"].items()}
    assert statuses == dict(correctness="ok", quickstart="ok", throughput="error", decode="ok")
    assert report["parts"]["throughput"]["reason"] == "ValueError: a bug in the part"
    assert "--parts" not in report["command"] and "--budget_s=100" in report["command"]
    assert gpu_check.command_line(dict(gpu_check.DEFAULTS, dry_run=True)) == "python -m tools.gpu_check --dry_run=True"
    seen, report = dry_run_report(tmp_path, monkeypatch, 30)
    assert "correctness" not in seen and set(seen) == {"quickstart", "throughput", "decode"}
    part = report["parts"]["correctness"]
    assert (part["status"], part["reason"]) == ("skipped", "6 s left")


def test_parts_options_and_shares(tmp_path):
    """--parts of only commas, --budget_s=30 exactly, --out_dir naming a file, --parts in any order,
    and the share of one part alone (the whole budget).
    (a hunt: a changed line did this, and no test failed)"""
    options = dict(gpu_check.DEFAULTS, out_dir=str(tmp_path / "out"))
    with pytest.raises(gpu_check.UserError, match=r"--parts= , : unknown part \(none\)"):
        gpu_check.check_options(dict(options, parts=" , "))
    assert gpu_check.check_options(dict(options, budget_s=30)) == list(gpu_check.PARTS)
    assert gpu_check.check_options(dict(options, parts="decode,correctness")) == ["correctness", "decode"]
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    one_error_line(gpu_check.main, ["--dry_run", f"--out_dir={a_file}"], f"--out_dir={a_file} is a file")
    assert gpu_check.plan(["decode"], 300) == dict(decode=dict(share_s=300.0, full_estimate_s=255))


def test_a_work_dir_that_is_a_file_is_one_line_before_anything_is_written(tmp_path):
    """--work_dir naming a file is one line `error: ... (fix: ...)`, and no report is written (it was a
    FileExistsError traceback after the report files). (a hunt found it: makedirs on a file)"""
    a_file, out_dir = tmp_path / "a_file", tmp_path / "out"
    a_file.write_text("")
    one_error_line(gpu_check.main, ["--dry_run", "--parts=decode", f"--out_dir={out_dir}", f"--work_dir={a_file}"],
                   f"--work_dir={a_file} is a file")
    assert not out_dir.exists()


def test_an_out_dir_that_cannot_be_written_fails_before_any_part(tmp_path, capsys):
    """An --out_dir that cannot be written is one line, before the plan is printed or --work_dir made.
    (a hunt: a changed line did this, and no test failed)"""
    work_dir = tmp_path / "work"
    one_error_line(gpu_check.main, ["--dry_run", "--out_dir=/proc/nope", f"--work_dir={work_dir}"],
                   "cannot write /proc/nope/")
    assert not work_dir.exists() and "budget" not in capsys.readouterr().out


def test_a_stopped_command_keeps_its_lines_and_its_grace(tmp_path, monkeypatch):
    """A part's command killed by a signal still shows what it printed (unbuffered even where the
    user's environment does not say so); one whose deadline the watch moved into the past still gets
    STOP_GRACE_S after SIGTERM to save last.pt. (a hunt: a changed line did this, and no test failed)"""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    log = str(tmp_path / "log.txt")
    killed = "import os, signal\nprint('iter 0: measured')\nos.kill(os.getpid(), signal.SIGTERM)"
    result = gpu_check.run_until([sys.executable, "-c", killed], time.time() + 60, log)
    assert result.lines == ["iter 0: measured"] and result.returncode == -15

    class DeadlinePassed:
        def see(self, line, deadline):
            return time.time() - 30 if line == "started" else deadline

    saves = ("import signal, sys, time\ndef stop(*args):\n    time.sleep(1)\n    print('saved last.pt', flush=True)\n"
             "    sys.exit(3)\nsignal.signal(signal.SIGTERM, stop)\nprint('started', flush=True)\n" + SLEEP_60)
    result = gpu_check.run_until([sys.executable, "-c", saves], time.time() + 60, log, DeadlinePassed())
    assert result.cut and result.returncode == 3 and result.lines == ["started", "saved last.pt"]


def test_a_fresh_record_has_no_earlier_items(tmp_path):
    """A second call with the same --work_dir reports only its own items, not the first call's.
    (a hunt: a changed line did this, and no test failed)"""
    gpu_check.write_record(gpu_check.fresh_record(str(tmp_path), "decode"), dict(item="eager gpt", status="ok"))
    assert gpu_check.read_records(gpu_check.fresh_record(str(tmp_path), "decode")) == []


def fake_run_until(returncode, lines, calls=None):
    def run(cmd, deadline, log_path, watch=None, env=None):
        if calls is not None:
            calls.append(dict(cmd=cmd, deadline=deadline, watch=watch))
        for line in lines:
            if watch is not None:
                watch.see(line, deadline)
        return types.SimpleNamespace(returncode=returncode, lines=lines, cut=False, wall_s=1.0)
    return run


def test_correctness_reports_pytests_errors_and_an_empty_run_fails(tmp_path, monkeypatch):
    """pytest's ERROR lines are in the report beside its FAILED ones; a pytest run that exits 0 with
    no test line (a plugin's own format) is "failed", not "ok". (a hunt: a changed line did this, and
    no test failed)"""
    ctx = types.SimpleNamespace(work_dir=str(tmp_path), child_env={}, log_path=os.devnull)
    lines = ["tests/test_gpu.py::test_a[gpt] PASSED", "tests/test_gpu.py::test_b[gpt] ERROR",
             "tests/test_gpu.py::test_c[gpt] FAILED", "FAILED tests/test_gpu.py::test_c[gpt] - AssertionError",
             "ERROR tests/test_gpu.py::test_b[gpt] - RuntimeError: CUDA error",
             "===== 1 failed, 1 passed, 1 error in 3.00s ====="]
    monkeypatch.setattr(gpu_check, "run_until", fake_run_until(1, lines))
    part = gpu_check.run_correctness(ctx, 0, {})
    assert part["status"] == "failed" and part["problems"] == lines[3:5]
    assert part["counts"] == dict(PASSED=1, FAILED=1, ERROR=1, SKIPPED=0)
    monkeypatch.setattr(gpu_check, "run_until", fake_run_until(0, ["some plugin's own output format"]))
    assert gpu_check.run_correctness(ctx, 0, {})["status"] == "failed"


def test_train_pys_lines_read_as_train_py_means_them():
    """train.py's ETA with seconds moves the deadline to ETA + 10 s; the time to the first iteration
    is the first one's; one log window is its own median; "interrupted at iteration N" counts N, and
    the last logged iteration N counts N + 1. (a hunt: a changed line did this, and no test failed)"""
    now = time.time()
    watch = gpu_check.TrainWatch(base_deadline=now + 60, limit=now + 300)
    line = "iter {}: loss 2.0000, lr 1.00e-03, 90.00 ms/iter, 100 tok/s, eta 0:01:{}"
    assert watch.see(line.format(0, 50), now + 60) == pytest.approx(now + 120, abs=2)
    first = watch.t_first_iter
    time.sleep(0.01)
    watch.see(line.format(100, 40), now + 60)
    assert watch.t_first_iter == first and watch.last_iter == 100
    assert gpu_check.steady_median([90.0]) == 90.0 and gpu_check.steady_median([90.0, 12.0, 13.0]) == 12.5
    lines = ["interrupted at iteration 451: saved out/last.pt; continue with --init_from=resume", "=== exit"]
    assert gpu_check.iterations_done(lines, watch) == 451
    assert gpu_check.iterations_done(["iter 100: ..."], watch) == 101


def test_a_quickstart_that_exits_1_after_its_last_evaluation_failed(tmp_path, monkeypatch):
    """train.py that logged its last evaluation and then exited 1 (a full disk) is "failed", not run
    in full; its best val loss is the lowest; it runs on only until QUICKSTART_RESERVE_S before the end.
    (a hunt: a changed line did this, and no test failed)"""
    lines = ["step 0: train loss 4.0000, val loss 4.1000",
             "iter 0: loss 4.0000, lr 1.00e-03, 90.00 ms/iter, 100 tok/s, eta 0:00:10",
             "step 10: train loss 2.0000, val loss 1.5000", "step 20: train loss 1.9000, val loss 1.7000",
             "Traceback (most recent call last):", "OSError: [Errno 28] No space left on device"]
    calls = []
    monkeypatch.setattr(gpu_check, "run_until", fake_run_until(1, lines, calls))
    ctx = types.SimpleNamespace(dry_run=True, end=time.time() + 300, work_dir=str(tmp_path), log_path=os.devnull,
                                child_env={}, quickstart_dir=str(tmp_path / "none"))
    part = gpu_check.run_quickstart(ctx, time.time() + 60, {})
    assert (part["status"], part["full"]) == ("failed", False)
    assert (part["final_val_loss"], part["best_val_loss"]) == (1.7, 1.5)
    assert calls[0]["watch"].limit == ctx.end - gpu_check.QUICKSTART_RESERVE_S


def test_a_measuring_workers_items_decide_its_status(tmp_path, monkeypatch):
    """The worker stops 3 s before its part's deadline; one item in error makes the part "failed", one
    skipped makes it "partial". (a hunt: a changed line did this, and no test failed)"""
    deadlines = []

    def worker(status):
        def run(cmd, deadline, log_path, watch=None, env=None):
            options = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--"))
            deadlines.append(float(options["deadline"]) - deadline)
            gpu_check.write_record(options["record"], dict(item="gpt", status="ok"))
            gpu_check.write_record(options["record"], dict(item="lgpt", status=status))
            return types.SimpleNamespace(returncode=0, lines=[], cut=False, wall_s=1.0)
        return run

    ctx = types.SimpleNamespace(dry_run=True, work_dir=str(tmp_path), log_path=os.devnull, child_env={},
                                quickstart_dir="")
    statuses = {}
    for status in ("ok", "error", "skipped"):
        monkeypatch.setattr(gpu_check, "run_until", worker(status))
        statuses[status] = gpu_check.run_measuring_worker("throughput", ctx, time.time() + 60)["status"]
    assert statuses == dict(ok="ok", error="failed", skipped="partial")
    assert deadlines == [pytest.approx(-3)] * 3


def test_a_worker_without_its_record_is_one_line():
    """`python -m tools.gpu_check --worker=throughput` typed by hand is one line, not a traceback.
    (a hunt: a changed line did this, and no test failed)"""
    one_error_line(gpu_check.main, ["--worker=throughput"], "--worker=throughput is internal")


def cannot_measure(item):
    raise gpu_check.NotMeasured("no quickstart checkpoint")


def test_items_past_the_deadline_or_not_measurable_are_skipped(tmp_path):
    """An item past the deadline says "0 s left", not a negative time; one this run cannot measure is
    "skipped" with its reason, not an error. (a hunt: a changed line did this, and no test failed)"""
    path = str(tmp_path / "record.jsonl")
    gpu_check.measure_items(dict(record=path, deadline=time.time() - 5, dry_run=False), {"past": 1}, one_figure)
    gpu_check.measure_items(dict(record=path, deadline=time.time() + 60, dry_run=False), {"x": 1}, cannot_measure)
    items = gpu_check.read_records(path)
    assert items[0]["reason"] == "budget: needs ~1 s (estimate), 0 s left"
    assert (items[1]["status"], items[1]["reason"]) == ("skipped", "no quickstart checkpoint")


def test_the_dry_runs_throughput_says_not_compiled(monkeypatch):
    """The dry run's throughput items are recorded as not compiled (it leaves torch.compile out).
    (a hunt: a changed line did this, and no test failed)"""
    tiny_shape = dict(n_layer=1, n_head=1, n_embd=8, block_size=8, vocab_size=16, dropout=0.0)
    monkeypatch.setattr(gpu_check, "throughput_config", lambda name, dry_run: dict(tiny_shape))
    figures = gpu_check.measure_throughput("gpt", torch.device("cpu"), dry_run=True, peak=gpu_check.peak_for("cpu"))
    assert figures["compiled"] is False and figures["timed_steps"] == 3


def test_a_quickstart_with_only_last_pt_is_a_checkpoint(tmp_path):
    """A quickstart stopped by the budget leaves only last.pt: decode samples from it.
    (a hunt: a changed line did this, and no test failed)"""
    assert not gpu_check.has_checkpoint(str(tmp_path))
    (tmp_path / "last.pt").write_bytes(b"")
    assert gpu_check.has_checkpoint(str(tmp_path))


def test_the_commit_says_whether_files_changed(monkeypatch):
    """The report's commit reads "(with uncommitted changes)" only when git status lists a change.
    (a hunt: a changed line did this, and no test failed)"""
    for status, commit in ((None, "4f1189c0abcd"), (" M model.py", "4f1189c0abcd (with uncommitted changes)")):
        answers = {"rev-parse": "4f1189c0abcd", "status": status}
        monkeypatch.setattr(gpu_check, "command_output", lambda cmd: answers[cmd[1]])
        assert gpu_check.git_commit() == commit


def test_the_report_of_some_parts_shows_the_worst_error_of_each_check(tmp_path, monkeypatch):
    """--parts=correctness alone renders its report (the others "not selected | - | -"); each check's
    row is its worst error and where; the CPU's diagnosis has no empty "device time" table.
    (a hunt: a changed line did this, and no test failed)"""
    figures = [dict(check="fp32 logits", error=1e-5, tolerance=1e-4, case="gpt"),
               dict(check="fp32 logits", error=9e-5, tolerance=1e-4, case="cgpt")]

    def correctness(ctx, deadline, paths):
        return dict(status="ok", wall_s=1.0, command="x", counts=dict(PASSED=2, FAILED=0, ERROR=0, SKIPPED=0),
                    summary="2 passed in 1s", problems=[], skip_reasons=[], figures=figures)

    monkeypatch.setattr(gpu_check, "PART_RUNNERS", dict(gpu_check.PART_RUNNERS, correctness=correctness))
    with contextlib.redirect_stdout(io.StringIO()):
        gpu_check.main(["--dry_run", "--parts=correctness", f"--out_dir={tmp_path / 'out'}",
                        f"--work_dir={tmp_path / 'work'}"])
    [path] = (tmp_path / "out").glob("*.md")
    markdown = path.read_text().splitlines()
    assert "| decode | not selected | - | - |" in markdown and "| fp32 logits | 9.00e-05 | 1e-04 | cgpt |" in markdown
    item = dict(shape="1x32", weights="random weights", tokens=40, variants={},
                profile=dict(device_ops=[], cpu_ops=[dict(op="aten::mm", calls=2.0, us=30.0)],
                             runtime_calls_per_token={}))
    diagnosis = "\n".join(gpu_check.markdown_diagnosis(item))
    assert "aten::mm" in diagnosis and "device time" not in diagnosis
