"""StopRequest (safety_net/stop.py) and the runtime checks and RNG states (safety_net/runtime.py) as units. Each
test here was missing until a hunt changed a line of those files and no test failed."""

import os
import random
import signal
import threading

import numpy as np
import pytest
import torch

from safety_net import runtime
from safety_net.configurator import UserError
from safety_net.stop import StopRequest


def main_thread_only():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are the main thread's")


def test_stop_request_leaves_a_callers_own_handler_alone():
    main_thread_only()

    def own(signum, frame):
        pass

    previous = signal.signal(signal.SIGINT, own)
    try:
        with StopRequest():
            assert signal.getsignal(signal.SIGINT) is own
            assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL   # the default one is replaced
        assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, previous)


def test_stop_request_outside_the_main_thread_installs_nothing():
    """train() called from a thread (a notebook's worker, a test runner's): signal.signal would raise there."""
    outcome = []

    def body():
        try:
            with StopRequest() as stop:
                outcome.append(stop.previous)
        except Exception as e:
            outcome.append(e)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert outcome == [{}]


def test_only_rank_zero_announces_a_stop(capsys):
    """Each DDP rank gets the signal: one line, rank 0's; a second signal stops at once on any rank."""
    other = StopRequest(master=False, world=2)
    other.handle(signal.SIGTERM, None)
    assert capsys.readouterr().out == "" and other.asked and not other.requested   # the vote decides
    master = StopRequest(master=True, world=1)
    master.handle(signal.SIGINT, None)
    assert "SIGINT: stopping after this iteration" in capsys.readouterr().out and master.requested
    with pytest.raises(KeyboardInterrupt):
        other.handle(signal.SIGTERM, None)


def test_stop_request_ends_the_vote_group_it_made(tmp_path, monkeypatch):
    """Under DDP each StopRequest makes a gloo group for its votes; train() called again and again in one process
    (tools, tests) left one more group behind each time. Every group made (torch.distributed.new_group) is
    destroyed (destroy_process_group of that group), counted through torch's public functions."""
    main_thread_only()
    made, destroyed = [], []
    new_group = torch.distributed.new_group
    destroy = torch.distributed.destroy_process_group

    def counting_new_group(*args, **kwargs):
        made.append(new_group(*args, **kwargs))
        return made[-1]

    def counting_destroy(group=None):
        destroyed.append(group)
        destroy(group)

    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                                         world_size=1)
    try:
        monkeypatch.setattr(torch.distributed, "new_group", counting_new_group)
        monkeypatch.setattr(torch.distributed, "destroy_process_group", counting_destroy)
        for _ in range(3):
            with StopRequest(master=True, world=2) as stop:
                stop.vote()
        monkeypatch.undo()
        assert len(made) == 3 and destroyed == made
    finally:
        torch.distributed.destroy_process_group()


def test_restored_rng_states_draw_the_same_numbers():
    """What last.pt records for an exact resume: python's, numpy's and torch's generators each draw again what
    they drew after the state was taken."""
    device = torch.device("cpu")
    state = runtime.rng_state(device)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    runtime.restore_rng(state, device)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_an_apple_gpu_run_records_and_restores_its_own_generator(monkeypatch):
    """Dropout on an Apple GPU (mps) draws from the device's generator, seeded apart from the CPU's: last.pt records
    its state and a resume on mps restores it (a hunt: a resume there drew other dropout masks). Faked here: this
    machine has no such device."""
    saved_state = torch.tensor([7, 8, 9], dtype=torch.uint8)
    restored = []
    monkeypatch.setattr(torch.mps, "get_rng_state", saved_state.clone)
    monkeypatch.setattr(torch.mps, "set_rng_state", restored.append)
    mps = torch.device("mps")
    state = runtime.rng_state(mps)
    runtime.restore_rng(state, mps)
    assert len(restored) == 1 and torch.equal(restored[0], saved_state)
    runtime.restore_rng({**state, "mps": None}, mps)   # a last.pt from before: nothing to restore
    cpu = torch.device("cpu")
    assert runtime.rng_state(cpu)["mps"] is None
    runtime.restore_rng(state, cpu)   # a resume on another device leaves that device's generator
    assert len(restored) == 1


def test_seeds_and_thread_counts_at_their_bounds(monkeypatch):
    """A bool is no seed (train() as a library takes one past the command line's parser); every CPU is a thread
    count the machine has."""
    with pytest.raises(UserError, match="--seed must be an integer"):
        runtime.check_seed(True)
    runtime.check_seed(0)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    runtime.check_num_threads(4)
    with pytest.raises(UserError, match=r"--num_threads must be an integer in \[0, 4\]"):
        runtime.check_num_threads(5)


def test_busy_machine_counts_the_cores_torch_leaves_free(monkeypatch):
    """Busy: a load above the cores torch's own threads leave free (plus a half); one thread is never slowed."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    cpu = torch.device("cpu")
    for threads, load, busy in ((2, 0.6, True), (2, 0.4, False), (1, 0.4, False), (1, 3.5, False)):
        monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
        monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
        assert bool(runtime.busy_machine(cpu)) == busy, (threads, load)


def test_the_largest_seed_is_one_below_max_seed():
    """--seed=4294967295 runs and --seed=4294967296 is one line (a hunt: a changed line did this, and no test
    failed)."""
    runtime.check_seed(runtime.MAX_SEED - 1)
    with pytest.raises(UserError, match=r"--seed must be an integer in \[0, 4294967295\], got 4294967296"):
        runtime.check_seed(runtime.MAX_SEED)


def test_busy_machine_reads_the_last_minutes_load(monkeypatch):
    """A burst of load in the last minute is what slows the next steps: the note names the 1-minute load, not
    the 15-minute one (a hunt: a changed line did this, and no test failed)."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 0.2, 0.2))
    assert runtime.busy_machine(torch.device("cpu")).startswith("the machine is busy (load 3.0 on 2 CPUs)")


@pytest.fixture
def fake_gpus(monkeypatch):
    """CUDA faked as available with n GPUs (set n through the returned function), no MPS."""
    def gpus(n):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    return gpus


def test_bad_devices_are_one_line(fake_gpus):
    """--device=cuda:x, cuda:1 on a one-GPU machine, and mps where there is none are each one line with the fix
    (a hunt: a changed line did this, and no test failed); the one-GPU fix read "--device=cuda:0 to cuda:0" (a
    hunt found it: now "--device=cuda:0")."""
    fake_gpus(1)
    with pytest.raises(UserError, match="unknown device 'cuda:x'"):
        runtime.resolve_device("cuda:x")
    with pytest.raises(UserError, match=r"device 'cuda:1' does not exist: this machine has 1 GPU\(s\) "
                                        r"\(fix: --device=cuda:0, or --device=cuda\)"):
        runtime.resolve_device("cuda:1")
    assert runtime.resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(UserError, match="device 'mps' requested but MPS is not available"):
        runtime.resolve_device("mps")
    fake_gpus(3)
    with pytest.raises(UserError, match=r"this machine has 3 GPU\(s\) \(fix: --device=cuda:0 to cuda:2, or"):
        runtime.resolve_device("cuda:3")


def test_each_ddp_rank_takes_the_gpu_of_its_local_rank(fake_gpus):
    """torchrun on 2 GPUs: --device=cuda puts local rank 1 on cuda:1 (a hunt: a changed line did this, and no test
    failed)."""
    fake_gpus(2)
    assert runtime.resolve_device("cuda", local_rank=1) == torch.device("cuda:1")
    assert runtime.resolve_device("cuda") == torch.device("cuda")


@pytest.mark.parametrize("bf16, dtype", [(True, "bfloat16"), (False, "float16")])
def test_auto_dtype_on_cuda_is_bf16_where_supported(monkeypatch, bf16, dtype):
    """--dtype=auto on a GPU: bfloat16 where it has it, else float16 (a hunt: a changed line did this, and no test
    failed)."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert runtime.resolve_dtype("auto", torch.device("cuda")) == dtype
    assert runtime.resolve_dtype("auto", torch.device("cpu")) == "float32"


def test_torchrun_is_rank_and_world_size_both(monkeypatch):
    """RANK alone (set by some other launcher) is no torchrun run (a hunt: a changed line did this, and no test
    failed)."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not runtime.launched_by_torchrun()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert runtime.launched_by_torchrun()
