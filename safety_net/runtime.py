"""
Where a model runs: the device (resolve_device), the dtype and its autocast, CPU threads and a note when other jobs
keep the CPUs busy, seeds; whether torchrun started the process (launched_by_torchrun), a step rank 0 alone takes
(on_rank_zero) and every RNG's state, which makes a resume exact (gather_rng_states, restore_rng).
"""

import contextlib
import os
import random
import sys

import numpy as np
import torch

from safety_net.configurator import UserError, one_line


# seeds of train.py and sample.py: numpy's range [0, 2**32), nanoGPT's habit (neither seeds numpy now); a larger
# one used to end in torch's "Overflow when unpacking long long" traceback
MAX_SEED = 2**32


def check_seed(seed, key="seed"):
    """UserError unless the seed is an integer in [0, MAX_SEED) (every script that takes a seed)."""
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < MAX_SEED):
        raise UserError(f"--{key} must be an integer in [0, {MAX_SEED - 1}], got {seed!r} (fix: e.g. --{key}=1337)")


def busy_machine(device):
    """When other jobs keep the CPUs busy, torch's threads wait on each other and steps get many times slower, while
    one thread is not slowed: that in one line with the fix ("" on an idle machine, a GPU, or with one thread)."""
    if str(device) != "cpu" or not hasattr(os, "getloadavg") or torch.get_num_threads() == 1:
        return ""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cpus - torch.get_num_threads() + 0.5:
        return ""
    return (f"the machine is busy (load {load:.1f} on {cpus} CPUs): {torch.get_num_threads()} torch threads wait on "
            f"each other (fix: --num_threads=1)")


def check_num_threads(n, key="num_threads"):
    """UserError unless --num_threads is 0 (torch's default) up to the machine's CPU count: more threads only wait
    on each other, and a huge count crashes torch (a segfault at 100000 threads, after starving the machine of
    processes while it starts them)."""
    cpus = os.cpu_count() or 1
    if not (isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= cpus):
        raise UserError(f"--{key} must be an integer in [0, {cpus}] (this machine's CPUs), got {n!r} "
                        f"(fix: --{key}=1, or 0 for torch's default)")


def check_cpu_compiler(device, fix="--compile=False"):
    """UserError when torch.compile would run on the CPU without a C++ compiler: inductor builds C++ kernels there,
    and a machine without one failed at the first compiled call, in a 150-line traceback, after the run had begun
    (a hunt)."""
    if torch.device(device).type != "cpu":
        return
    from torch._inductor.cpp_builder import get_cpp_compiler   # here: importing inductor takes a second
    try:
        get_cpp_compiler()
    except Exception as e:   # InvalidCxxCompiler, or what a broken compiler raises
        raise UserError(f"torch.compile on the CPU needs a C++ compiler, and none works here ({one_line(e)}) "
                        f"(fix: install one, e.g. g++, or {fix})") from None


def resolve_device(name, local_rank=None):
    """torch.device for --device: 'auto' = cuda > mps > cpu; under DDP one GPU per local rank."""
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if mps else "cpu"
    kind = name.split(":")[0]
    try:   # 'cuda:x' is not a device; 'cpu:3' is to torch, but every map_location to it fails
        index = torch.device(name).index
    except RuntimeError:
        index = -1
    if kind not in ("cpu", "cuda", "mps") or index is not None and (index < 0 or kind != "cuda" and index != 0):
        raise UserError(f"unknown device '{name}' (fix: --device=auto|cpu|cuda|cuda:N|mps)")
    if (kind == "cuda" and not torch.cuda.is_available()) or (kind == "mps" and not mps):
        raise UserError(f"device '{name}' requested but {kind.upper()} is not available "
                        f"(fix: --device=cpu or --device=auto)")
    if kind == "cuda" and index is not None and index >= torch.cuda.device_count():
        gpus = torch.cuda.device_count()
        devices = "--device=cuda:0" if gpus == 1 else f"--device=cuda:0 to cuda:{gpus - 1}"
        raise UserError(f"device '{name}' does not exist: this machine has {gpus} GPU(s) "
                        f"(fix: {devices}, or --device=cuda)")
    if kind == "cuda" and local_rank is not None:
        name = f"cuda:{local_rank}"
    if kind == "cpu":   # 'cpu:0' too: the checkpoints it saved would name it, and no map_location reads it back
        name = "cpu"
    return torch.device(name)


def resolve_dtype(name, device):
    """'float32' | 'bfloat16' | 'float16' for --dtype: 'auto' = bf16 on CUDA if supported, else fp16;
    float32 elsewhere."""
    if name not in ("auto", "float32", "bfloat16", "float16"):
        raise UserError(f"unknown dtype '{name}' (fix: --dtype=auto|float32|bfloat16|float16)")
    if name != "auto":
        return name
    if str(device).startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def autocast(device, dtype):
    """The autocast context for a resolved dtype, by name or torch.dtype (none for float32)."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=str(device).split(":")[0], dtype=dtype)


@contextlib.contextmanager
def quiet_stderr():
    """Silence what libraries write to file descriptor 2 or sys.stderr meanwhile: the profiler backend's start/stop
    lines (tools.benchmarks), ExecuTorch's import, CPU probe and load errors (tools.executorch.run)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):   # and Python's sys.stderr
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def launched_by_torchrun():
    """Whether torchrun started this process (it sets RANK and WORLD_SIZE, as train.py reads them)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def on_rank_zero(step, rank, world):
    """step() on rank 0 alone, the other DDP ranks waiting for it; when it fails (bad input, a lock held) they exit
    1 quietly and rank 0 says why. They ended in the traceback of a collective whose peer had gone (a hunt)."""
    error = None
    if rank == 0:
        try:
            step()
        except Exception as e:   # raised below, once the other ranks know
            error = e
    if world > 1:
        failed = [error is not None]
        torch.distributed.broadcast_object_list(failed, src=0)
        if failed[0] and rank != 0:
            raise SystemExit(1)
    if error is not None:
        raise error


def rng_state(device):
    """Every RNG's state (python, numpy, torch; cuda's or mps's on those devices: dropout there draws from the
    device's own generator), as tensors and plain values the safe loader reads."""
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        # numpy's state as tensors/ints, so checkpoints load with torch.load(weights_only=True)
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "mps": torch.mps.get_rng_state() if device.type == "mps" else None,
    }


def restore_rng(state, device):
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].cpu().numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
    if device.type == "mps" and state.get("mps") is not None:   # last.pt from before 2026-12-02 has none
        torch.mps.set_rng_state(state["mps"].cpu())


def gather_rng_states(device, gather):
    """(this rank's RNG state, every rank's when gather (DDP), else None): what last.pt records. gather is a
    collective: every rank must call it."""
    rng = rng_state(device)
    if not gather:
        return rng, None
    ranks = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(ranks, rng)
    return rng, ranks
