"""Shared pytest fixtures. pytest.ini puts the repository root on the import path (tests import model, train, ...)."""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import warnings

# One thread per test process: on a 2-core machine torch's default thread pool thrashes as soon as anything
# else runs (10-100x slower steps); subprocesses started by tests inherit this through the environment.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest
import torch

import torch._dynamo

from tools.torch_internals import inductor_config

torch.set_num_threads(1)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# offline: the local copies in ../shared/data (CI's layout), unless the caller points elsewhere
SHARED_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
for _var, _file in (("SHAKESPEARE_INPUT", "tinyshakespeare/input.txt"), ("GPT2_TIKTOKEN_FILE", "gpt2/gpt2.tiktoken")):
    if _var not in os.environ and os.path.isfile(os.path.join(SHARED_DATA, _file)):
        os.environ[_var] = os.path.join(SHARED_DATA, _file)


def gpt2_ranks_file():
    """The local GPT-2 ranks file: GPT2_TIKTOKEN_FILE, else ../shared/data/gpt2/gpt2.tiktoken; None when neither exists."""
    for path in (os.environ.get("GPT2_TIKTOKEN_FILE"), os.path.join(SHARED_DATA, "gpt2", "gpt2.tiktoken")):
        if path and os.path.isfile(path):
            return path
    return None


@pytest.fixture
def gpt2_file(monkeypatch):
    path = gpt2_ranks_file()
    if path is None:
        pytest.skip("no GPT-2 ranks file: set GPT2_TIKTOKEN_FILE or provide ../shared/data/gpt2/gpt2.tiktoken")
    monkeypatch.setenv("GPT2_TIKTOKEN_FILE", path)
    return path


@pytest.fixture
def offline(monkeypatch):
    """Any download attempt fails like it does without network."""
    def no_network(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.delenv("SHAKESPEARE_INPUT", raising=False)
    monkeypatch.delenv("WIKITEXT103_SOURCE", raising=False)


def one_error_line(main, args, *words):
    """Run main(args); assert a non-zero exit with one `error: ... (fix: ...)` line holding `words`."""
    with pytest.raises(SystemExit) as e:
        main(args)
    message = e.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    assert "(fix: " in message and all(w in message for w in words), message
    return message


@pytest.fixture(autouse=True)
def compile_config_unchanged():
    """No test may leave torch._dynamo.config or inductor's config (torch._inductor.config, a global one) changed:
    a later compile test would then run under another config, or fail on an attribute that an undone monkeypatch
    deleted (pytest 9.2 with dynamo's config module). A changed value is put back, then the test fails."""
    configs = {"torch._dynamo.config": torch._dynamo.config, "torch._inductor.config": inductor_config()}
    before = {name: config.get_config_copy() for name, config in configs.items()}
    yield
    problems = []
    for name, config in configs.items():
        broken, changed = config_changes(config, before[name])
        if broken:
            problems.append(f"this test left {name} broken: {broken} no longer readable (use config.patch)")
        if changed:
            problems.append(f"this test left {name} changed: {changed} (use {name}.patch)")
    assert not problems, "; ".join(problems)


def config_changes(config, before):
    """(keys no longer readable, keys whose value changed) of a torch config module against its copy `before`;
    the changed ones are set back. Every key is read through the module, as compiling does (the config copy
    alone misses a deleted attribute)."""
    broken, changed = [], []
    with warnings.catch_warnings():   # reading a deprecated key warns
        warnings.simplefilter("ignore")
        for key, value in before.items():
            try:
                now = getattr(config, key)
            except AttributeError:
                broken.append(key)
                continue
            if now != value:
                changed.append(key)
                setattr(config, key, value)
    return broken, changed


def write_token_dataset(data_dir, n_train=20000, n_val=4000, vocab_size=16, seed=0):
    """A learnable synthetic token dataset in prepare.py's format: mostly a fixed cycle through the
    vocabulary (next = (3 * prev + 1) mod V) with 10% random tokens, so a tiny model's loss drops fast."""
    rng = np.random.default_rng(seed)
    n = n_train + n_val
    ids = np.empty(n, dtype=np.uint16)
    ids[0] = 0
    noise = rng.random(n) < 0.1
    rand = rng.integers(0, vocab_size, n)
    for i in range(1, n):
        ids[i] = rand[i] if noise[i] else (3 * int(ids[i - 1]) + 1) % vocab_size
    os.makedirs(data_dir, exist_ok=True)
    ids[:n_train].tofile(os.path.join(data_dir, "train.bin"))
    ids[n_train:].tofile(os.path.join(data_dir, "val.bin"))
    with open(os.path.join(data_dir, "meta.json"), "w") as f:
        json.dump({"dataset": "synthetic", "tokenizer": "char", "vocab_size": vocab_size,
                   "chars": [chr(ord("a") + i) for i in range(vocab_size)]}, f)
    return str(data_dir)


def write_char_checkpoint(root, model, chars, name="out"):
    """root/name/ckpt.pt of `model` (as train.py saves it, at iteration 0) on a char dataset of `chars` whose
    root/data/meta.json it records. Returns root/name."""
    from safety_net.checkpoint import save_checkpoint
    import dataclasses
    data_dir = root / "data"
    data_dir.mkdir(exist_ok=True)
    meta = {"dataset": "tinychars", "tokenizer": "char", "vocab_size": len(chars), "chars": chars}
    (data_dir / "meta.json").write_text(json.dumps(meta))
    save_checkpoint(str(root / name / "ckpt.pt"), model.state_dict(), dataclasses.asdict(model.config),
                    iter_num=0, best_val_loss=9.9, config={}, dataset="tinychars", data_dir=str(data_dir))
    return root / name


@pytest.fixture
def tiny_data(tmp_path):
    """Path of a small synthetic dataset (train.bin, val.bin, meta.json; vocab 16)."""
    return write_token_dataset(tmp_path / "data")


def tiny_config(data_dir, out_dir):
    """train.py config overrides for a tiny, fast, deterministic CPU run (a few ms per iteration)."""
    return dict(
        data_dir=str(data_dir), dataset="synthetic", out_dir=str(out_dir),
        device="cpu", dtype="float32", compile=False,
        n_layer=2, n_head=2, n_embd=32, block_size=16, batch_size=8, dropout=0.0,
        max_iters=20, eval_interval=10, eval_iters=2, log_interval=1,
        learning_rate=3e-3, warmup_iters=2, lr_decay_iters=20, min_lr=3e-4,
    )


@pytest.fixture
def tiny_train_config(tiny_data, tmp_path):
    """tiny_config on the tiny_data dataset, writing to tmp_path/out."""
    return tiny_config(tiny_data, tmp_path / "out")


# --- the `slow` marker: compile-with-inductor proofs that take minutes on a CPU ----------------------
# --- the `gpu` marker: checks on a CUDA device (tests/test_gpu.py), skipped without one ---------------

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: minutes on a CPU (torch.compile with inductor); skipped unless "
                                       "selected with -m slow")
    config.addinivalue_line("markers", "gpu: needs a CUDA device, skipped without one (python -m tools.gpu_check "
                                       "runs them: docs/gpu.md); GPU_TESTS_ON_CPU=1 rehearses them on the CPU")


def pytest_collection_modifyitems(config, items):
    run_slow = "slow" in (config.getoption("markexpr") or "")
    run_gpu = torch.cuda.is_available() or os.environ.get("GPU_TESTS_ON_CPU") == "1"
    skip_slow = pytest.mark.skip(reason="slow: run with `pytest -m slow`")
    skip_gpu = pytest.mark.skip(reason="gpu: no CUDA device (docs/gpu.md)")
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        if "gpu" in item.keywords and not run_gpu:
            item.add_marker(skip_gpu)


@pytest.fixture
def one_thread():
    """One torch thread for the test, restoring the count after (a test or the code under test may change it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- another writer -------------------------------------------------------------------------------------

def refused_at_meta_json(monkeypatch, module, folder):
    """Patch module.write_meta (a dataset writer's last file) to record whether a training run starting then
    (fileio.lock_for_reading of `folder`) is refused: the writer holds its lock until meta.json. Returns the list
    of the refusals' messages ('not locked' where none came)."""
    from safety_net import fileio
    from safety_net.configurator import UserError
    seen = []
    real = module.write_meta

    def write_meta(out_dir, meta):
        try:
            fileio.lock_for_reading(str(folder)).close()
            seen.append("not locked")
        except UserError as e:
            seen.append(str(e))
        real(out_dir, meta)

    monkeypatch.setattr(module, "write_meta", write_meta)
    return seen


def hold_lock(folder):
    """Another process holding `folder`'s writer lock the way lock_dir takes it (flock, its pid in the file) until
    it is killed. Plain python, no torch: it starts in milliseconds."""
    from safety_net.fileio import LOCK_NAME
    code = ("import fcntl, os, sys, time\nf = open(sys.argv[1], 'a+')\nfcntl.flock(f, fcntl.LOCK_EX)\nf.seek(0)\n"
            "f.truncate()\nf.write(str(os.getpid()))\nf.flush()\nprint('locked', flush=True)\ntime.sleep(300)")
    holder = subprocess.Popen([sys.executable, "-c", code, os.path.join(folder, LOCK_NAME)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder
