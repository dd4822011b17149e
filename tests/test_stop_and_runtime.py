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
