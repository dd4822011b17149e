"""
Ctrl-C and SIGTERM during training (StopRequest): the first asks the loop to stop at the next iteration boundary,
where last.pt resumes exactly (DDP ranks vote at every boundary: one rank's request stops all), the second stops
at once.
"""

import signal
import threading

import torch


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM asks train.py's loop to stop at the next iteration boundary, where the state saved
    to last.pt is exactly resumable (`requested`); a second signal raises KeyboardInterrupt at once. Under DDP each
    rank gets its own signal, but all must stop at the same boundary: `requested` is set only by vote(), which
    every rank calls at every boundary. Installed only in the main thread and over the default handlers (a
    caller's own handlers are left alone). master: say so."""

    DEFAULT_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}

    def __init__(self, master=True, world=1):
        self.asked = False       # this process got the signal
        self.requested = False   # stop at the next boundary (asked here, or under DDP by any rank's vote)
        self.master = master
        self.world = world
        self.previous = {}
        self.group = None

    def __enter__(self):
        # the votes go over gloo, on the CPU: a vote at every iteration does not wait for the GPU (votes only at
        # log lines ran a stop on for log_interval iterations, past torchrun's 30 s before its SIGKILL; a hunt)
        if self.world > 1:
            self.group = torch.distributed.new_group(backend="gloo")
        if threading.current_thread() is threading.main_thread():
            for sig, default in self.DEFAULT_HANDLERS.items():
                if signal.getsignal(sig) == default:
                    self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, signum, frame):
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True
        self.requested = self.world == 1
        if self.master:
            print(f"\n{signal.Signals(signum).name}: stopping after this iteration to save last.pt "
                  f"(Ctrl-C again to stop at once)", flush=True)

    def vote(self):
        """DDP: every rank calls this at every iteration boundary (an all_reduce); a stop asked on any rank is then
        requested on all."""
        votes = torch.tensor(float(self.asked))
        torch.distributed.all_reduce(votes, group=self.group)
        self.requested = votes.item() > 0

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        if self.group is not None:
            torch.distributed.destroy_process_group(self.group)
