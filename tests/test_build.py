"""safety_net/build.py's checks at their edges, and the per-rank RNG of a resume (starting_point.restore): lines a
hunt changed one at a time while every test passed. Each check refuses what it names and lets through the value
just inside; the memory checks against a machine of 1 GiB (os.sysconf stood in for)."""
import os

import pytest
import torch

import variants
from model import GPT, GPTConfig
from safety_net.build import (MAX_LAYERS, batch_bytes_lower_bound, check_batch_memory, check_layer_count,
                              check_memory, check_mlp_ratio_applies, check_model_keys_read, depth_summary,
                              gpt_config_defaults, load_variant, weights_lower_bound)
from safety_net.configurator import UserError
from test_loaded_files import embedding_and_ffn_weights
from test_model import TINY


def test_a_model_key_at_its_default_or_under_its_technique_is_let_through():
    """check_model_keys_read refuses a key the model never reads, set to another value than its default; at its
    default it changes nothing (--rope_base=10000.0 beside learned positions), and a one-step Deep Thinking reads
    think_eta. check_mlp_ratio_applies: an mlp_ratio given at the value it has changes nothing either."""
    args = gpt_config_defaults()
    check_model_keys_read(args, {"rope_base": args["rope_base"]})
    with pytest.raises(UserError, match="rope_base=500.0 is read only with RoPE"):
        check_model_keys_read(args, {"rope_base": 500.0})
    check_model_keys_read(dict(args, think_steps=1), {"think_eta": 0.05, "think_memory": "first_layer"})
    sized = dict(args, mlp_hidden=40)
    check_mlp_ratio_applies(sized, {"mlp_ratio": args["mlp_ratio"]})
    with pytest.raises(UserError, match="mlp_ratio=2.0 changes nothing: mlp_hidden=40"):
        check_mlp_ratio_applies(sized, {"mlp_ratio": 2.0})


def test_the_layer_limit_takes_its_own_fix():
    check_layer_count({"n_layer": MAX_LAYERS})   # its fix: --n_layer=1000 or fewer
    with pytest.raises(UserError, match=f"--n_layer={MAX_LAYERS} or fewer"):
        check_layer_count({"n_layer": MAX_LAYERS + 1})


def test_a_variant_that_cannot_import_is_one_line(monkeypatch):
    """A user's variants/mine.py importing a module that is not there: a ModuleNotFoundError traceback without
    ImportError in load_variant's except."""
    def load(name):
        raise ModuleNotFoundError("No module named 'my_helpers'")

    monkeypatch.setattr(variants, "available", lambda: ["mine"])
    monkeypatch.setattr(variants, "load", load)
    with pytest.raises(UserError, match="unknown variant 'mine': No module named 'my_helpers'"):
        load_variant("mine")


@pytest.fixture
def one_gib(monkeypatch):
    """This machine, as the memory checks see it, has 1 GiB."""
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 2**18}
    monkeypatch.setattr(os, "sysconf", lambda name: pages[name])
    return 2**30


def test_the_weights_are_reckoned_in_float32(one_gib):
    """Over 268M weights are over 1 GiB in float32: refused (compared as weights, not bytes, they passed)."""
    big = GPTConfig(vocab_size=50304, n_layer=6, n_head=16, n_embd=2048)   # 304M weights: 1.1 GiB
    assert one_gib / 4 < weights_lower_bound(big) < one_gib
    with pytest.raises(UserError, match="GiB in float32, more than this machine's 1 GiB"):
        check_memory(big)
    check_memory(GPTConfig(vocab_size=50304, n_layer=1, n_head=16, n_embd=2048))


def test_the_losses_vector_and_the_batch_are_reckoned_on_every_cpu(one_gib):
    """estimate_loss's vector of eval_iters float32 losses counts 4 bytes each; 'cpu:0' is the CPU, checked as
    'cpu' is."""
    tiny = GPTConfig(**TINY)
    with pytest.raises(UserError, match="--eval_iters=300000000 needs 1 GiB"):
        check_batch_memory(tiny, 1, "cpu", eval_iters=300_000_000)
    check_batch_memory(tiny, 1, "cpu", eval_iters=200_000_000)
    for device in ("cpu", "cpu:0"):
        with pytest.raises(UserError, match="a micro-batch of 1000000 x 16 tokens"):
            check_batch_memory(tiny, 1_000_000, device)


def test_the_bounds_count_shishulms_top_attention_layers_and_pgpts_branches():
    """ShishuLM's top attention layers keep activations too (4 x width a token each); pgpt's token embedding is
    n_branches x n_embd wide: where an FFN has its two matrices the weights bound is the count itself."""
    shishulm = dict(TINY, n_attn_layers=1, mlp_type="standard")
    top = batch_bytes_lower_bound(GPTConfig(**shishulm, n_top_attn_layers=2), 1)
    extra = top - batch_bytes_lower_bound(GPTConfig(**shishulm), 1)
    assert extra == TINY["block_size"] * 4 * (4 * TINY["n_embd"] * 2)
    for flags in ({}, {"n_branches": 2, "tie_embeddings": False}):
        config = GPTConfig(**TINY, **flags)
        assert weights_lower_bound(config) == embedding_and_ffn_weights(GPT(config)), flags


def test_the_depth_line_counts_the_layers_of_a_branch():
    model = GPT(GPTConfig(**dict(TINY, n_branches=2, tie_embeddings=False)))
    assert depth_summary(model).startswith(f"{TINY['n_layer'] // 2} layers applied x 2 branches")


def test_a_rank_the_checkpoint_holds_no_state_for_keeps_its_own():
    """A resume restores rank 0's random state from `rng` and each rank's from `rng_ranks` when the number of ranks
    is the same; a rank with none (last.pt of one process, or of another number of ranks) keeps the stream
    train.py seeded: every rank given rank 0's state would draw the same dropout masks."""
    from safety_net.runtime import rng_state
    from safety_net.starting_point import StartingPoint
    model = GPT(GPTConfig(**TINY))
    optimizer = torch.optim.AdamW(model.parameters())
    torch.manual_seed(1)
    saved = rng_state(torch.device("cpu"))
    ranks = []
    for seed in range(4):
        torch.manual_seed(100 + seed)
        ranks.append(rng_state(torch.device("cpu")))
    start = StartingPoint.__new__(StartingPoint)
    start.config = {"init_from": "resume", "dropout": 0.0, "device": "cpu"}
    for rng_ranks in (None, ranks):   # one process's last.pt; one of 4 ranks, resumed on 2
        start.ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "path": "last.pt",
                      "rng": saved, "rng_ranks": rng_ranks}
        torch.manual_seed(42)   # this rank's own stream
        own = torch.get_rng_state()
        start.restore(model, optimizer, torch.amp.GradScaler("cpu", enabled=False), rank=1, world=2)
        assert torch.equal(torch.get_rng_state(), own)
    start.ckpt["rng_ranks"] = ranks[:2]   # the same number of ranks: its own slot
    start.restore(model, optimizer, torch.amp.GradScaler("cpu", enabled=False), rank=1, world=2)
    assert torch.equal(torch.get_rng_state(), ranks[1]["torch"])
