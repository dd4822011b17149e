"""
The generation loop behind GPT.generate, one phase per function (gpt-fast style):

    generate              prime the cache with the prompt, then one token per step; re-prime a full window
    sample_next           logits -> next token (greedy, or top-k sampling)
    static_cache          the model's reusable static cache, for a compiled step
    compiled_decode_step  GPT.decode_step through torch.compile, made once per model

The model itself only needs GPT.new_cache and GPT.decode_step (model.py, section 8).
"""

import contextlib

import torch
from torch.nn import functional as F


@torch.inference_mode()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, use_kv_cache=True, generator=None,
             compile=False):
    """Sample max_new_tokens tokens after idx (B, T).

    With the KV cache each step feeds one token through the cached keys/values. When the window is
    full (block_size tokens) it is re-primed with the most recent block_size // 2 tokens: positions
    restart at 0, which keeps learned/RoPE positions inside what the model was trained on. The
    plain path (use_kv_cache=False) feeds the very same window each step, so both paths compute
    the same logits and, with the same generator, produce the same text.
    compile=True: the single-token steps run compiled_decode_step over a static cache.
    """
    was_training = model.training
    model.eval()
    block_size = model.config.block_size
    cache = None
    if use_kv_cache:
        cache = static_cache(model, idx.size(0)) if compile else model.new_cache()
        step = compiled_decode_step(model) if compile else model.decode_step
    window_start, prime, idx_next = 0, True, None   # idx_next: the token sampled last
    skipping_guards = False
    with contextlib.ExitStack() as unchecked_steps:
        for _ in range(max_new_tokens):
            if idx.size(1) - window_start > block_size:  # window full: keep the recent half
                window_start = idx.size(1) - max(1, block_size // 2)
                prime = True
            if cache is None:
                logits, _ = model(idx[:, window_start:])
            elif prime:
                unchecked_steps.close()   # the prime and the next step run with dynamo's guards on
                skipping_guards = False
                cache.reset()   # same buffers, positions from 0
                logits, _ = model(idx[:, window_start:], cache=cache)
                prime = False
            else:
                logits = step(idx_next, cache)   # the last token (B, 1): same strides every step
                if compile and not skipping_guards:
                    # this step checked (dynamo's guards) that the compiled graph fits this model and cache;
                    # the next ones are the same call on the same buffers, and checking again costs ~0.2 ms
                    # a step on a CPU
                    unchecked_steps.enter_context(torch.compiler.set_stance(skip_guard_eval_unsafe=True))
                    skipping_guards = True
            idx_next = sample_next(logits[:, -1, :], temperature, top_k, generator)
            idx = torch.cat((idx, idx_next), dim=1)
    model.train(was_training)
    return idx


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """Pick the next token from last-position logits (B, V): greedy at temperature 0, else top-k sampling."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):   # top_k >= vocabulary: nothing to cut
        kth = torch.topk(logits, top_k).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    # torch.multinomial(probs, 1) draws its token this very way (the same token, the same generator state:
    # tested), but first checks probs with several extra ops; in a decode step that is ~0.2 ms (gpt-fast
    # samples the same way). argmax of p_i / E_i with E_i ~ Exp(1) picks token i with probability p_i.
    race = torch.empty_like(probs).exponential_(generator=generator)
    return torch.argmax(probs / race, dim=-1, keepdim=True)


def static_cache(model, batch_size):
    """The model's reusable static cache for compiled decoding (same buffers -> the compiled step is reused
    across generate calls without recompiling or re-recording). Kept on the model as `_static_cache`."""
    device = model.tok_emb.wte.weight.device
    autocast = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
    key = (batch_size, device, autocast)   # the buffers take the dtype of the keys: autocast's
    kept = getattr(model, "_static_cache", None)
    if kept is None or kept[0] != key:
        kept = model._static_cache = (key, model.new_cache(static=True))
    return kept[1]


def compiled_decode_step(model, backend="inductor"):
    """model.decode_step through torch.compile, made once per model (gpt-fast style) and kept on it as
    `_compiled_decode_step`: with a static cache every step has the same shapes, so one graph serves the
    whole generation. On a GPU inductor's "reduce-overhead" replays it as a CUDA graph. On the CPU its
    cpp_wrapper calls the kernels from C++ instead of a Python wrapper, and the per-call check of every
    input's size is left out (size_asserts: ~90 inputs, ~0.15 ms a step; dynamo's guards checked them on
    the first step of the generate call)."""
    if getattr(model, "_compiled_decode_step", None) is None:
        options = {}
        if backend == "inductor":
            cuda = model.tok_emb.wte.weight.is_cuda
            cpu_options = {"cpp_wrapper": True, "size_asserts": False}
            options = dict(mode="reduce-overhead") if cuda else dict(options=cpu_options)
        model._compiled_decode_step = torch.compile(model.decode_step, backend=backend, fullgraph=True, **options)
    return model._compiled_decode_step
