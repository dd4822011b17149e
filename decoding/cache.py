"""
The inference cache of incremental decoding: keys/values of every attention application, Deep Thinking's
memory and cgpt's conv window, so that each new token is one cheap forward step (model.py, section 8).
"""

import torch


class KVCache:
    """Keys and values of one attention application, preallocated for `max_len` positions.

    GQA: only the n_kv_head heads are stored, so the cache shrinks by n_head / n_kv_head.
    """

    def __init__(self, max_len, static=False):
        self.max_len = max_len
        self.static = static
        self.k = self.v = None

    def _allocate(self, k, v):
        shape = (k.size(0), k.size(1), self.max_len, k.size(3))
        self.k, self.v = k.new_zeros(shape), v.new_zeros(shape)
        if self.static:
            _mark_static(self.k, self.v)

    def append(self, k, v, start):
        """Write k, v (B, H_kv, T, D) at positions start.. and return all keys/values up to there."""
        if self.k is None:
            self._allocate(k, v)
        end = start + k.size(2)
        self.k.narrow(2, start, k.size(2)).copy_(k)
        self.v.narrow(2, start, v.size(2)).copy_(v)
        return self.k.narrow(2, 0, end), self.v.narrow(2, 0, end)

    def write(self, k, v, positions):
        """Static cache: write k, v at `positions` (a tensor) and return the whole buffers; the caller masks
        the slots not written yet. No shape and no Python number changes from one decode step to the next."""
        if self.k is None:
            self._allocate(k, v)
        self.k.index_copy_(2, positions, k)
        self.v.index_copy_(2, positions, v)
        return self.k, self.v

    def nbytes(self):
        return 0 if self.k is None else 2 * self.k.numel() * self.k.element_size()


def _mark_static(*tensors):
    """Tell torch.compile (CUDA graphs) that these buffers keep their address from call to call."""
    import torch._dynamo
    for t in tensors:
        torch._dynamo.mark_static_address(t)


class InferenceCache:
    """Everything incremental decoding needs, keyed by the *application* of a layer.

    A slot is (branch, layer, think_pass), so a shared block applied twice, each pgpt branch and each
    Deep Thinking pass get their own entries:
      kv[slot]         keys/values of that attention application (KVCache)
      memory[slot]     Deep Thinking's memory after that pass (KVCache; read by the next pass)
      conv_tail[slot]  the last kernel-1 inputs of a causal ConvShrink (cgpt)
    `length` is the number of tokens already seen.

    static=True is the gpt-fast layout for a compiled decode step: keys/values are written at the positions
    of a tensor (`position` holds the next one) and attention reads the whole max_len buffer with a mask,
    so every step has the same shapes and no Python number changes, and torch.compile (with CUDA graphs)
    reuses one graph for the whole generation. `length` is not kept then. Deep Thinking is not supported.
    """

    def __init__(self, max_len, static=False):
        self.max_len = max_len
        self.static = static
        self.length = 0
        self.position = None   # static: LongTensor (1,), created at the first forward on the model's device
        self.kv, self.memory, self.conv_tail = {}, {}, {}

    def get(self, table, slot):
        if slot not in table:
            table[slot] = KVCache(self.max_len, self.static)
        return table[slot]

    def conv_window(self, slot, x, n_past, start):
        """cgpt's causal Conv1d (ConvShrink): x (B, T, C) preceded by the n_past inputs before it (zeros
        before position 0); the last n_past inputs are kept for the next call (in place when static)."""
        past = self.conv_tail.get(slot)
        if past is None or (not self.static and start == 0):
            past = x.new_zeros(x.size(0), n_past, x.size(2))
            if self.static:
                _mark_static(past)
                self.conv_tail[slot] = past
        window = torch.cat([past, x], dim=1)
        if self.static:
            past.copy_(window[:, window.size(1) - n_past:])
        else:
            self.conv_tail[slot] = window[:, window.size(1) - n_past:]
        return window

    def start_positions(self, length, device):
        """Static: positions of the next `length` tokens as a tensor (the position buffer is made on first use)."""
        if self.position is None:
            self.position = torch.zeros(1, dtype=torch.long, device=device)
            _mark_static(self.position)
        return self.position + torch.arange(length, device=device)

    def advance(self, n):
        """Count n more tokens as seen (static: in place on the position tensor, inside a compiled step)."""
        if self.static:
            self.position.add_(n)
        else:
            self.length += n

    def reset(self):
        """Start a new sequence, keeping the allocated buffers (a compiled step keeps its graph)."""
        self.length = 0
        if self.static and self.position is not None:
            self.position.zero_()
            for tail in self.conv_tail.values():
                tail.zero_()   # cgpt's conv window: zeros before position 0

    def nbytes(self):
        return sum(c.nbytes() for table in (self.kv, self.memory) for c in table.values())
