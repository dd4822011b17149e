"""model.sample_next on its own: what sample.py, model.generate and the runners' copies of it must do.

Greedy at temperature 0 and at top_k=1; top_k=k draws only among the k largest logits; draws follow
softmax(logits / T) (over the k largest, renormalised, with top_k); the same seed gives the same draws. No
executorch here: tests/test_executorch.py compares the runner's copy of the draw with this one, and these tests
stand without it (tests/mutation.py's sample_next_* mutants are caught by them alone).

The statistical bound (test_draws_follow_softmax_of_logits_over_temperature): N independent draws, and for each of
the V tokens Hoeffding's inequality P(|f_i - p_i| >= eps) <= 2 exp(-2 N eps^2) on its frequency f_i; over the V
tokens of every case (a union bound) a correct sampler fails with probability at most FALSE_FAILURE for a random
seed. The seed is fixed, so the test is deterministic; the bound says it does not pass or fail by luck.
"""
import math

import pytest
import torch

from model import sample_next

N_DRAWS = 20_000
FALSE_FAILURE = 1e-6   # per case, over all its tokens


def hoeffding_eps(n_draws, n_tokens, false_failure=FALSE_FAILURE):
    """The frequency tolerance eps with n_tokens * 2 exp(-2 n eps^2) = false_failure."""
    return math.sqrt(math.log(2 * n_tokens / false_failure) / (2 * n_draws))


def logits_of(seed, vocab=12, batch=1, scale=2.0):
    return torch.randn(batch, vocab, generator=torch.Generator().manual_seed(seed)) * scale


def draws(logits, temperature, top_k, seed, n=N_DRAWS):
    """n independent draws from one row of logits: the row repeated n times, one call (each row draws alone)."""
    generator = torch.Generator().manual_seed(seed)
    return sample_next(logits.expand(n, -1), temperature, top_k, generator)[:, 0]


def test_temperature_zero_is_argmax():
    logits = logits_of(0, vocab=50, batch=8)
    out = sample_next(logits, 0)
    assert out.shape == (8, 1) and torch.equal(out[:, 0], logits.argmax(dim=-1))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 5.0])
def test_top_k_1_is_argmax(temperature):
    """The two largest logits nearly equal, so keeping one too many would draw the second almost half the time."""
    logits = logits_of(1, vocab=20)
    top2 = logits[0].topk(2).indices
    logits[0, top2[1]] = logits[0, top2[0]] - 0.05
    assert torch.all(draws(logits, temperature, 1, seed=3, n=500) == top2[0])


@pytest.mark.parametrize("k", [2, 5, 19])
def test_top_k_never_draws_outside_the_k_largest(k):
    """At a high temperature the tail is nearly as likely as the head: every token outside the k largest would
    be drawn often if it could be."""
    logits = logits_of(2, vocab=20)
    allowed = set(logits[0].topk(k).indices.tolist())
    drawn = set(draws(logits, 10.0, k, seed=4, n=2000).tolist())
    assert drawn <= allowed
    assert len(drawn) == k   # at T=10 every allowed token turns up in 2000 draws


@pytest.mark.parametrize("temperature,top_k", [(1.0, None), (0.5, None), (2.0, None), (0.7, 4), (3.0, 4)])
def test_draws_follow_softmax_of_logits_over_temperature(temperature, top_k):
    """Each token's frequency in N_DRAWS draws is within Hoeffding's eps of softmax(logits / T) (restricted to the
    top_k largest logits and renormalised): eps = 0.0206 for 12 tokens, false failure <= 1e-6 (module docstring).
    Multiplying by T instead moves a probability by 0.1 or more here."""
    logits = logits_of(5)
    scaled = logits[0] / temperature
    if top_k is not None:
        scaled = scaled.masked_fill(scaled < scaled.topk(top_k).values[-1], float("-inf"))
    expected = torch.softmax(scaled.double(), dim=-1)
    counts = torch.bincount(draws(logits, temperature, top_k, seed=6), minlength=logits.size(-1))
    frequency = counts.double() / N_DRAWS
    eps = hoeffding_eps(N_DRAWS, logits.size(-1))
    assert (frequency - expected).abs().max().item() < eps, (frequency, expected, eps)


def test_same_seed_same_draws():
    """The draw depends on the generator only: the same seed gives the same tokens and leaves the generator in the
    same state (so every later draw agrees too); another seed gives other tokens."""
    logits = logits_of(7, vocab=30, batch=64)
    a, b, c = (torch.Generator().manual_seed(s) for s in (11, 11, 12))
    first = [sample_next(logits, 0.9, 10, a) for _ in range(3)]
    assert all(torch.equal(x, sample_next(logits, 0.9, 10, b)) for x in first)
    assert torch.equal(a.get_state(), b.get_state())
    assert not torch.equal(first[0], sample_next(logits, 0.9, 10, c))


def test_a_prompt_longer_than_block_size_is_read_from_its_last_half_window():
    """generate re-primes a full window with its most recent block_size // 2 tokens, and a prompt longer than
    block_size is such a window (docs/sampling_and_eval.md): the tokens after it are those after its last
    block_size // 2 tokens, with and without the cache, and not those after its last block_size (nanoGPT's)."""
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11, init_std=0.5)).eval()
    prompt = torch.randint(0, 11, (1, 20))
    for use_kv_cache in (True, False):
        long = model.generate(prompt, 3, temperature=0, use_kv_cache=use_kv_cache)[:, 20:]
        half = model.generate(prompt[:, -4:], 3, temperature=0, use_kv_cache=use_kv_cache)[:, 4:]
        assert torch.equal(long, half)
    nanogpt_window = model.generate(prompt[:, -8:], 1, temperature=0)[:, 8:]
    assert not torch.equal(long[:, :1], nanogpt_window)   # the weights tell the two windows apart
