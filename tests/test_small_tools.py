"""Small tool modules called directly: the bench report's tables (tools/benchmarks/report.py), the bench's
measurements (tools/benchmarks/measure.py), the comparison plots (tools/plots.py), seeds and equal compute
(tools/spread.py), the FLOP count (tools/flops.py), paper 003's learning-rate rule, the support table and the
Hugging Face tokenizer wrapper. Each test holds a line a mutation hunt changed without any test failing."""

import csv
import math

import pytest
import torch

from model import GPT, GPTConfig
from tools import plots, spread, support
from tools.benchmarks import measure, report
from tools.flops import flops_per_token
from tools.pangu.scaled_lr import scaled_lr

MiB = 2 ** 20


# --- tools/benchmarks/report.py ------------------------------------------------------------------

def bench_results(batch_b=2, entries=2, measures=("train", "infer", "memory", "sample", "decode")):
    """render's arguments: gpt and lgpt at seq 8 and 16 (gpt OOM at 16), one sampling row."""
    cfg = dict(measure=list(measures), optimizer_step=True, repeats=3, warmup=1, infer_batch=1, decode_steps=4,
               gen_tokens=16, mode="paper001", compile=False)
    rows = [dict(model="gpt", params=1e6, seq=8, batch=2, train_ms=10.0, train_tok_s=1600.0,
                 train_peak_bytes=12 * MiB, infer_model="gpt", prefill_ms=2.0, decode_ms=1.0, kv_bytes=0.5 * MiB,
                 infer_peak_bytes=3 * MiB),
            dict(model="lgpt", params=0.8e6, seq=8, batch=batch_b, train_ms=8.0, train_tok_s=2000.0,
                 train_peak_bytes=10 * MiB, infer_model="lgpt", prefill_ms=1.5, decode_ms=0.5,
                 kv_bytes=0.25 * MiB, infer_peak_bytes=2 * MiB),
            dict(model="gpt", params=1e6, seq=16, batch=2, note="OOM"),
            dict(model="lgpt", params=0.8e6, seq=16, batch=batch_b, train_ms=16.0, train_tok_s=2000.0,
                 train_peak_bytes=20 * MiB)]
    samples = [dict(model="gpt", infer_model="gpt", gen_tokens=16, sample_tok_s_cache=400.0,
                    sample_tok_s_plain=100.0, kv_block_bytes=1 * MiB)]
    return cfg, [dict(name="gpt"), dict(name="lgpt")][:entries], rows, samples, "cpu", None


def test_report_number_formats():
    """A progress line shows 4 significant digits, a zero is 0.00 (not n/a) and the MiB columns divide by 2**20
    (a hunt: a changed line did this, and no test failed)."""
    assert report.short(1.23456) == "1.235"
    assert report.num(0.0, ".2f") == "0.00" and report.num(None, ".2f") == "n/a"
    assert report.mb(12 * MiB) == "12.0"


def test_report_speed_ratio_at_the_same_batch():
    """"speed vs gpt" compares rows at the same seq and batch, and 10 ms against 5 ms is 2.00x faster
    (a hunt: a changed line did this, and no test failed)."""
    rows = [dict(model="gpt", seq=8, batch=2, train_ms=10.0), dict(model="lgpt", seq=8, batch=2, train_ms=5.0),
            dict(model="lgpt", seq=8, batch=4, train_ms=5.0)]
    assert report.ratio_vs(rows, "gpt", "train_ms", rows[1]) == "2.00x"
    assert report.ratio_vs(rows, "gpt", "train_ms", rows[2]) == "n/a"


def test_report_render_tables():
    """The bench's Markdown: the training table's peak column with --measure=memory only, '-' without memory,
    decode speed from decode ms, the sampling speed-up cache / no cache and paper 001's tables for two models
    with % reduction of the first's value (a hunt: a changed line did this, and no test failed)."""
    full = report.render(*bench_results())
    assert "| lgpt | 8 | 1.50 | 0.50 | 2.00x | 0.25 | 2 |" in full           # decode 1.0 / 0.5 ms
    assert "| gpt | 16 | 400.0 | 100.0 | 4.0x | 1 |" in full
    assert "### Paper 001 Tables 3/4 layout" in full
    assert "| 8 | 10.00 | 8.00 | 20.00 | 2.00 | 1.50 | 25.00 |" in full
    memory_only = report.render(*bench_results(measures=["memory"]))
    assert "### Training" in memory_only and "| gpt | 1.00M | 8 | 2 | 10.0 | 1,600 | 1.00x | 12.0 |" in memory_only
    train_only = report.render(*bench_results(measures=["train"]))
    assert "| gpt | 1.00M | 8 | 2 | 10.0 | 1,600 | 1.00x | - |" in train_only
    different_batch = report.render(*bench_results(batch_b=4))
    assert "| lgpt | 0.80M | 8 | 4 | 8.0 | 2,000 | n/a | 10.0 |" in different_batch


def test_report_paper001_row_with_training_only():
    """With --measure=train paper 001's latency table still has a row per length, inference n/a
    (a hunt: a changed line did this, and no test failed)."""
    rows = [dict(model="gpt", seq=8, train_ms=10.0), dict(model="lgpt", seq=8, train_ms=8.0)]
    text = "\n".join(report.paper001_tables("gpt", "lgpt", rows, ["train"]))
    assert "| 8 | 10.00 | 8.00 | 20.00 | n/a | n/a | n/a |" in text


def test_report_write_out(tmp_path):
    """--out: a CSV's sampling row has seq 'sample', a Markdown file ends with a newline
    (a hunt: a changed line did this, and no test failed)."""
    cfg, entries, rows, samples, device, dtype = bench_results()
    text = report.render(cfg, entries, rows, samples, device, dtype)
    report.write_out(str(tmp_path / "o.csv"), text, rows, samples)
    with open(tmp_path / "o.csv") as f:
        written = list(csv.DictReader(f))
    assert [r["seq"] for r in written] == ["8", "8", "16", "16", "sample"]
    report.write_out(str(tmp_path / "o.md"), text, rows, samples)
    assert (tmp_path / "o.md").read_text() == text + "\n"


# --- tools/benchmarks/measure.py -----------------------------------------------------------------

TINY_BENCH = dict(n_layer=1, n_embd=16, n_head=2, block_size=16, vocab_size=32)


def bench_cfg(**kw):
    return dict(dict(seed=0, compile=False, optimizer_step=False, warmup=0, repeats=1, max_step_seconds=1.0,
                     infer_batch=1, decode_steps=8, gen_tokens=4, sample_repeats=1, keep_heaviest_branch=False,
                     measure=["train"], seq_lens=[8]), **kw)


def recording_model(seen):
    """A tiny model whose forward records the shape of its input."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY_BENCH))
    forward = model.forward
    model.forward = lambda idx, targets=None, **kw: (seen.append(tuple(idx.shape)), forward(idx, targets, **kw))[1]
    return model


def test_measure_steps_and_token_counts():
    """The bench's training step runs on (batch, seq) tokens and its tokens/s counts batch x seq; inference at seq 4
    prefills 1 token then decodes 3 (a hunt: a changed line did this, and no test failed)."""
    seen = []
    r = measure.bench_train(recording_model(seen), bench_cfg(), "cpu", torch.float32, 8, 2, False)
    assert seen[-1] == (2, 8)
    assert round(r["train_tok_s"] * r["train_ms"] / 1000) == 2 * 8
    seen.clear()
    measure.bench_infer(recording_model(seen), bench_cfg(), "cpu", torch.float32, 4, False)
    assert [s[1] for s in seen] == [4, 1, 1, 1, 1]


def test_measure_peak_bytes_counts_what_was_live():
    """The peak memory of a step adds the tensors live before it (a hunt: a changed line did this, and no test
    failed)."""
    assert measure.peak_bytes(lambda: torch.ones(1000), "cpu", lambda: [torch.zeros(1000)]) == 8000


def test_measure_seq_lengths(monkeypatch):
    """A seq equal to the block size is measured; a seq whose step would take over --max_step_seconds by the last
    step's time per token is skipped (a hunt: a changed line did this, and no test failed)."""
    entry = dict(name="gpt", args=TINY_BENCH, batch_size=2)
    rows, _ = measure.run_entry(entry, bench_cfg(seq_lens=[16]), "cpu", torch.float32)
    assert [(r["seq"], "train_ms" in r) for r in rows] == [(16, True)]
    monkeypatch.setattr(measure, "bench_train", lambda *a, **k: dict(train_ms=600.0, train_tok_s=1.0))
    rows, _ = measure.run_entry(entry, bench_cfg(seq_lens=[8, 16]), "cpu", torch.float32)
    assert [(r["seq"], r.get("note")) for r in rows] == [
        (8, None), (16, "skipped: a step would take > 1s (--max_step_seconds)")]


# --- tools/plots.py ------------------------------------------------------------------------------

def ev(it, v, bw=None):
    return dict(iter=it, loss=v + 0.1, val_loss=v, val_loss_heaviest=None, elapsed_s=1.0, branch_weights=bw)


def log(*evals):
    return {"train": [], "eval": list(evals)}


def captured_figures(monkeypatch):
    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, plt: (figs.append(fig), path)[1])
    return figs


def lines(fig):
    return [[(line.get_label(), list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines]
            for ax in fig.axes]


def test_plots_read_log_and_mean_curve(tmp_path):
    """read_log leaves out a train row without a loss and reads val_loss_heaviest from its own column; the mean
    curve of several seeds is at the iterations all seeds evaluated, averaged over the seeds (a hunt: a changed line
    did this, and no test failed)."""
    (tmp_path / "log.csv").write_text("iter,kind,loss,val_loss,val_loss_heaviest,branch_weights\n"
                                      "1,train,,,,\n2,eval,2.0,2.1,,\n")
    read = plots.read_log(str(tmp_path))
    assert read["train"] == [] and read["eval"][0]["val_loss"] == 2.1
    assert read["eval"][0]["val_loss_heaviest"] is None
    assert plots._mean_curve([[ev(1, 2.0), ev(2, 1.5)], [ev(1, 2.2)]], "val_loss") == ([1], [pytest.approx(2.1)])
    its, means = plots._mean_curve([[ev(1, 2.0), ev(2, 1.6), ev(3, 1.4)], [ev(1, 2.2), ev(2, 1.8), ev(3, 1.6)]],
                                   "val_loss")
    assert its == [1, 2, 3] and means == pytest.approx([2.1, 1.7, 1.5])


def test_plots_figures_lines_and_labels(tmp_path, monkeypatch):
    """The figures' lines: a model of 2 seeds is labelled 'gpt (mean of 2 seeds)', loss against compute is at
    iteration x FLOPs per iteration without iteration 0, every pgpt branch has a line, and plot_alphas leaves no
    figure open (a hunt: a changed line did this, and no test failed)."""
    plt = plots._pyplot()
    plt.close("all")
    plots.plot_alphas({"a": [(0.5, 0.5)]}, str(tmp_path / "a.png"))
    assert plt.get_fignums() == []
    figs = captured_figures(monkeypatch)
    plots.plot_loss_curves({"gpt": [log(ev(1, 2.0), ev(2, 1.5)), log(ev(1, 2.2), ev(2, 1.7))]}, "l.png")
    plots.plot_loss_vs_compute({"gpt": log(ev(0, 4.0), ev(10, 2.0), ev(20, 1.5))}, {"gpt": 1e9}, "c.png")
    plots.plot_branch_weights({"pgpt": log(ev(10, 2.0, [0.3, 0.7]), ev(20, 1.5, [0.2, 0.8]))}, "b.png")
    try:
        seeds, compute, branches = (lines(f) for f in figs)
        assert [lab for lab, _, _ in seeds[1] if not lab.startswith("_")] == ["gpt (mean of 2 seeds)"]
        assert compute == [[("gpt", [1e10, 2e10], [2.0, 1.5])]]
        labels = [lab for lab, _, _ in branches[0] if not lab.startswith("_")]
        assert labels == ["pgpt: branch 0 (decoder_1)", "pgpt: branch 1 (decoder_2)"]
    finally:
        for f in figs:
            plt.close(f)


def test_plots_residual_alphas_of_the_first_branch():
    """residual_alphas reads the first branch's alpha of each layer's own attention and FFN (a hunt: a changed line
    did this, and no test failed)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=4, n_embd=16, n_head=2, block_size=8, vocab_size=32, enhanced_residual=True,
                          n_branches=2, tie_embeddings=False))
    with torch.no_grad():
        for b, stack in enumerate(model.branches):
            for i, sub in enumerate(list(stack.attn) + list(stack.mlp)):
                sub.alpha_logit.fill_(0.1 * i + b)
    sig = lambda x: 1 / (1 + math.exp(-x))
    assert plots.residual_alphas(model) == [(pytest.approx(sig(0.0)), pytest.approx(sig(0.2))),
                                           (pytest.approx(sig(0.1)), pytest.approx(sig(0.3)))]


# --- tools/spread.py, tools/flops.py, tools/pangu/scaled_lr.py, tools/support.py ------------------

def test_spread_edges():
    """The last evaluation is reached at an iteration that float arithmetic puts a hair past it, and a Welch t of
    exactly 2 is within noise (a hunt: a changed line did this, and no test failed)."""
    assert spread.val_loss_at([(1, 2.0), (3, 1.0)], (0.1 * 3) / 0.1) == 1.0
    a, b = dict(loss=0.0, loss_std=1.0, n_seeds=2), dict(loss=2.0, loss_std=1.0, n_seeds=2)
    assert spread.noise_verdict(a, b, "loss") == ("within noise", 2.0)


def test_flops_attention_scores_per_layer_width():
    """The FLOPs per token grow with the sequence length by the attention scores, 6 x 2 x the layer's width per key,
    at each attention layer's own width (a hunt: a changed line did this, and no test failed)."""
    for args in (dict(), dict(tie_embeddings=False, shrink_every=1, n_attn_layers=2, n_top_attn_layers=1)):
        cfg = GPTConfig(n_layer=4, n_embd=32, n_head=2, block_size=16, vocab_size=65, **args)
        with torch.device("meta"):
            model = GPT(cfg)
        widths = cfg.widths()
        scores = sum(6 * 2 * widths[layer] * 8 for layer in cfg.attention_layers())
        assert flops_per_token(model) - flops_per_token(model, 8) == scores


def test_scaled_lr_refuses_a_zero_base_batch_and_a_negative_lr():
    """scaled_lr refuses a zero base batch size and a negative base lr with a ValueError naming the value (a hunt: a
    changed line did this, and no test failed)."""
    with pytest.raises(ValueError, match="base_batch_size=0"):
        scaled_lr(48, 0, 1e-3)
    with pytest.raises(ValueError, match="base_lr=-0.001"):
        scaled_lr(48, 12, -1e-3)


def test_support_no_effect_leaves_exports_and_kv_cache_tested():
    """norm_eps changes what the GGUF export writes and init_scheme the KV-cache path's model: their tests must set
    them (a hunt: a changed line did this, and no test failed)."""
    assert support.must_be_tested("norm_eps", "gguf")
    assert support.must_be_tested("init_scheme", "kv_cache")
    assert not support.must_be_tested("norm_eps", "flops")


# --- tools/huggingface/tokenizer.py --------------------------------------------------------------

def test_hf_tokenizer_word_level_and_metaspace():
    """A word-level tokenizer with multi-character words encodes a prompt of words, and a BPE tokenizer with a
    Metaspace decoder streams its pieces with spaces (a hunt: a changed line did this, and no test failed)."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from safety_net.tokenizers import encode_start
    from tools.huggingface.tokenizer import TokenBytes, TransformersTokenizer
    t = Tokenizer(models.WordLevel({"a": 0, "hello": 1, "[UNK]": 2}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = TransformersTokenizer(PreTrainedTokenizerFast(tokenizer_object=t))
    assert encode_start(tok, "hello a", "the model's tokenizer", 3) == [1, 0]
    bpe = Tokenizer(models.BPE({"\u2581hello": 0, "\u2581world": 1, "a": 2}, []))
    bpe.decoder = decoders.Metaspace()
    token_bytes = TokenBytes(bpe)
    assert token_bytes(0) + token_bytes(1) == b" hello world"
