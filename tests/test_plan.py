"""tools.plan: the plan it reads from a built model agrees with that model (parameters, sharing plan, layer shapes,
attention placement), with what generation allocates (the KV cache) and with what a forward pass computes (FLOPs
counted by torch), for every preset and for random valid flag combinations; pictures, checkpoints, bad input."""
import dataclasses
import os
import random

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from model import GPT, GPTConfig, KVCache
from tests.conftest import one_error_line, write_token_dataset
from tests.test_model import FLAGS, TINY, sharing_indices
from tools import plan as plan_tool
from tools.benchmarks.measure import cache_bytes
from tools.flops import flops_per_token
from tools.layers import layer_sets
import variants
from safety_net.fileio import atomic_save


def random_combos(n, seed=0):
    """n valid configurations made of 2-3 FLAGS entries on TINY (invalid combinations skipped), named."""
    rng, names, combos = random.Random(seed), sorted(FLAGS), {}
    while len(combos) < n:
        picked = rng.sample(names, rng.choice((2, 3)))
        args = {**TINY}
        for name in picked:
            args.update(FLAGS[name])
        try:
            GPTConfig(**args)
        except ValueError:
            continue
        combos["+".join(picked)] = args
    return combos


COMBOS = random_combos(10)
# the flags that change the plan's shape (branches, widths, sharing, attention, heads, embedding, passes)
SHAPES = ("gpt", "pgpt3", "lgpt", "cgpt_k3", "swiglu", "mqa", "factorized", "factorized_untied", "share_attn",
          "shishu_bottom_top", "attn_top_only", "head_bias", "deep_thinking", "deep_thinking_first_layer_1",
          "post_norm_pgpt_cgpt", "enhanced_residual_init", "mlp_ratio")
TINY_CONFIGS = {**{f"flag:{k}": {**TINY, **FLAGS[k]} for k in SHAPES}, **COMBOS}
PRESETS = {name: {**plan_tool.MODEL_FIELDS, **variants.load(name)} for name in variants.available()}


def meta_model(args):
    with torch.device("meta"):
        return GPT(GPTConfig(**args))


def check_plan_matches_model(model, plan):
    cfg = model.config
    assert plan.unique_params == model.get_num_params(non_embedding=False)
    assert plan.unique_params - plan.params.get("positions", 0) == model.get_num_params()
    # the equal-compute accounting (tools/flops.py, training = 3 x forward) counts what the plan counts (which
    # test_kv_cache_and_flops_as_measured holds against torch's FlopCounterMode) but the memory keys of Deep
    # Thinking's middle passes (tools/flops.py says why)
    middle_passes = max(cfg.think_steps - 1, 0)
    memory_keys = sum(4 * r.width_in * cfg.block_size * middle_passes for r in plan.rows if r.n_head)
    assert flops_per_token(model) == 3 * (plan.flops_per_token() - memory_keys)
    attn_index, mlp_index = sharing_indices(model.branches[0])
    widths = cfg.widths()
    for b, stack in enumerate(model.branches):
        rows = [r for r in plan.rows if r.branch == b]
        assert [r.layer for r in rows] == list(range(cfg.layers_per_branch()))
        assert [r.attn_set for r in rows] == attn_index == sharing_indices(stack)[0]
        assert [r.mlp_set for r in rows] == mlp_index == sharing_indices(stack)[1]
        # attention exactly where the model has it
        assert [r.n_head > 0 for r in rows] == [layer in cfg.attention_layers() for layer in range(len(rows))]
        for r, nxt in zip(rows, rows[1:] + [None]):
            ffn = stack.mlp[r.mlp_set].inner
            assert r.width_in == widths[r.layer] == ffn.up.in_features == ffn.down.out_features
            assert r.hidden == ffn.up.out_features
            if r.attn_set is not None:
                attn = stack.attn[r.attn_set].inner
                assert attn.qkv_proj.in_features == r.width_in == attn.out_proj.out_features
                assert (r.n_head, r.n_kv_head) == (attn.n_head, attn.n_kv_head)
            # the width out is what the next application (or the head) reads; a shrink layer is there iff it halves
            assert r.width_out == (nxt.width_in if nxt else cfg.final_width())
            assert bool(r.shrink) == (r.width_out != r.width_in) == (layer_sets(stack)[r.layer][2] is not None)
    if not cfg.tie_embeddings:
        assert model.lm_head.in_features == cfg.final_width()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_plan_matches_model(name):
    model = meta_model(PRESETS[name])
    plan = plan_tool.read_plan(model, name)
    check_plan_matches_model(model, plan)
    assert plan.passes == model.config.think_steps + 1
    assert name in plan_tool.format_plan(plan)


@pytest.mark.parametrize("name", sorted(COMBOS))
def test_random_flags_plan_matches_model(name):
    model = meta_model(COMBOS[name])
    check_plan_matches_model(model, plan_tool.read_plan(model, name))


def test_shared_applications_share_weights():
    """A deliberate check of the ids: layer sharing gives the same module (the same weights) to the same id."""
    model = meta_model({**TINY, **FLAGS["shishu_bottom_top"]})
    plan = plan_tool.read_plan(model, "shishu")
    stack = model.branches[0]
    assert [r.attn_set for r in plan.rows] == [0, None, None, 1]
    assert [r.mlp_set for r in plan.rows] == [0, 1, 1, 2]
    assert stack.mlp[plan.rows[1].mlp_set] is stack.mlp[plan.rows[2].mlp_set]


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_kv_cache_and_flops_as_measured(name):
    """The KV cache per token is what generation allocates (model.py's KVCache after a prefill, per position of its
    max_len buffers); the forward FLOPs per token are what torch's FlopCounterMode counts over a full context."""
    args = TINY_CONFIGS[name]
    torch.manual_seed(0)
    model = GPT(GPTConfig(**args)).eval()
    plan = plan_tool.read_plan(model, name)
    cache, batch = KVCache(args["block_size"]), 2
    with torch.no_grad():
        model(torch.randint(0, args["vocab_size"], (batch, 5)), cache=cache)
    assert plan.kv_bytes_per_token * batch * cache.max_len == cache_bytes(cache)
    assert (plan.kv_bytes_per_token > 0) == (len(model.config.attention_layers()) > 0)

    T = model.config.block_size
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):   # the math path's matmuls are counted
        model(torch.zeros((1, T), dtype=torch.long), all_logits=True)
    assert plan.flops_per_token() * T == counter.get_total_flops()


def test_picture_written(tmp_path):
    # between them: branches, both shrink layers, MLP-only blocks, Deep Thinking, a factorized tied embedding
    for name, args in [("pgpt_cgpt", {**TINY, **FLAGS["post_norm_pgpt_cgpt"]}), ("lgpt", {**TINY, **FLAGS["lgpt"]}),
                       ("shishu_dt", {**TINY, **FLAGS["shishu_dt_post"], **FLAGS["factorized"]})]:
        path = tmp_path / f"{name}.png"
        plan_tool.draw(plan_tool.plan_of(args, name), path)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000


def test_command_preset_flags_png(tmp_path, capsys):
    png = tmp_path / "lgpt.png"
    plan_tool.main(["--variant=lgpt", "--n_layer=4", f"--png={png}"])
    out = capsys.readouterr().out
    assert "lgpt with n_layer=4" in out and png.stat().st_size > 0
    rows = [line for line in out.splitlines() if line.split()[:1] == ["0"]]
    assert len(rows) == 4 and "linear 384->192" in rows[1]


def test_command_train_config_file(tmp_path, monkeypatch, capsys):
    """`python -m tools.plan [config/file.py ...]`, as its usage said, refused every train.py config file ("unknown
    config key 'eval_interval'"; a hunt): a train.py config file gives the model it trains, read as tools.bench
    reads it (its variant, model keys, the dataset's vocab_size), the command line's flags on top."""
    monkeypatch.chdir(tmp_path)
    config = os.path.join(os.path.dirname(plan_tool.__file__), "..", "config", "lgpt_shakespeare_cpu.py")
    one_error_line(plan_tool.main, [config], "data/shakespeare_char is not prepared")   # its vocab: unknown yet
    # a dataset prepare.py has no text for: its fix failed in turn ("unknown dataset 'openwebtext'"; a hunt)
    text = tmp_path / "notes.txt"
    text.write_text("the fix, followed, prepares it\n" * 20)
    other = tmp_path / "other.py"
    other.write_text(open(config).read() + "\ndataset = 'openwebtext'\n")
    fix = one_error_line(plan_tool.main, [str(other)], "data/openwebtext is not prepared")
    assert "python prepare.py openwebtext --input=YOUR_TEXT.txt" in fix
    # a dataset a tool prepares: the tool's own command, which takes no --input (it refused the one named; a hunt)
    for dataset, command in (("wikitext103", "python -m tools.wikitext103"),
                             ("shakespeare_v4096", "python -m tools.pangu.compact_vocab shakespeare --vocab_size 4096")):
        by_tool = tmp_path / "by_tool.py"
        by_tool.write_text(open(config).read() + f"\ndataset = '{dataset}'\n")
        fix = one_error_line(plan_tool.main, [str(by_tool)], f"data/{dataset} is not prepared")
        assert f"(fix: {command}, from this folder" in fix and "--input" not in fix, fix
    import prepare
    prepare.main(["openwebtext", f"--input={text}"])
    plan_tool.main([str(other)])
    assert "vocabulary 17" in capsys.readouterr().out   # the text's 17 characters
    own = tmp_path / "own.py"
    own.write_text(open(config).read() + "\nvocab_size = 65\n")
    plan_tool.main([str(own), "--n_layer=3"])
    out = capsys.readouterr().out
    assert f"{own} with n_layer=3: 3 layer applications" in out and "vocabulary 65" in out
    rows = [line for line in out.splitlines() if line.split()[:1] == ["0"]]
    assert len(rows) == 3 and "linear 128->64" in rows[1]
    one_error_line(plan_tool.main, [str(own), "--variant=gpt"], "takes no --out_dir or --variant")


def test_command_train_config_file_that_starts_from_a_checkpoint(tmp_path, monkeypatch, capsys):
    """A config file with init_from (a checkpoint file, or resume) trains the checkpoint's model, in train.py's
    order; tools.plan and tools.bench showed GPTConfig's defaults (12 layers, 85.89M) for a 2-layer model without
    a word (a hunt). A Hugging Face start is one line: its size is known only once imported."""
    from tools import bench
    monkeypatch.chdir(tmp_path)
    args = {**TINY, "n_layer": 2}
    model = GPT(GPTConfig(**args))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 3,
                 "best_val_loss": 1.0, "optimizer": {}}, tmp_path / "run" / "last.pt")
    for start in (f"init_from = '{tmp_path / 'run' / 'last.pt'}'\nvocab_size = {args['vocab_size']}",
                  "init_from = 'resume'\nout_dir = 'run'"):
        (tmp_path / "ft.py").write_text(f"{start}\nn_head = 2\n")
        plan_tool.main(["ft.py"])
        out = capsys.readouterr().out
        assert "ft.py: 2 layer applications" in out and f"vocabulary {args['vocab_size']}" in out
        bench.main(["ft.py", "--dry_run"])
        assert f"2L d{args['n_embd']} 2h vocab {args['vocab_size']}" in capsys.readouterr().out
    (tmp_path / "hf.py").write_text("init_from = 'gpt2'\nvocab_size = 65\n")
    one_error_line(plan_tool.main, ["hf.py"], "init_from=gpt2 is a Hugging Face model")


def test_decode_bench_counts_the_weights_of_the_branch_that_runs():
    """tools.bench --mode=decode --keep_heaviest_branch counted both pgpt branches' weights (weights MB and GB/s
    about 2x, decode / linears about half; a hunt): with keep_branch set, the matrices a decode step reads are
    that branch's and the head's."""
    from tools.benchmarks.measure import weight_matrices
    model = GPT(GPTConfig(**{**TINY, **FLAGS["pgpt"]}))
    everything = sum(w.numel() for w, _ in weight_matrices(model))
    model.keep_branch = 1
    kept = sum(w.numel() for w, _ in weight_matrices(model))
    branch = sum(m.weight.numel() for m in model.branches[1].modules() if isinstance(m, torch.nn.Linear))
    assert kept == branch + model.lm_head.weight.numel()
    assert everything == kept + branch   # the other branch: as large


def test_command_checkpoint(tmp_path, capsys):
    args = {**TINY, **FLAGS["mobilellm"]}
    model = GPT(GPTConfig(**args))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 3},
                tmp_path / "ckpt.pt")
    plan_tool.main([f"--out_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert f"{model.get_num_params(non_embedding=False):,} unique" in out and "ckpt.pt" in out


@pytest.mark.parametrize("args, words", [
    (["--variant=nope"], ["unknown variant 'nope'"]),
    (["--variant=lgpt", "--n_head=5"], ["invalid model configuration", "n_head"]),
    (["--n_layr=3"], ["n_layr", "n_layer"]),
    (["--out_dir=/nonexistent/run"], ["does not exist"]),
    (["--out_dir=.", "--variant=gpt"], ["--out_dir"]),
    (["--variant=gpt", "--png=x.jpg"], ["PNG"]),
    (["--variant=gpt", "--png=/nonexistent/x.png"], ["does not exist"]),
    (["--gallery=somewhere", "--variant=gpt"], ["--gallery", "--variant"]),
    (["--variant=gpt", "--png=a_folder.png"], ["PNG"]),
    (["--gallery=a_file"], ["a_file", "not a folder"]),
    (["--variant=gpt", "--png=run/loss.png"], ["a training run's own loss.png"]),   # was replaced
])
def test_bad_input_one_line(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_folder.png").mkdir()
    (tmp_path / "a_file").write_text("")
    (tmp_path / "run").mkdir()
    for name in ("last.pt", "loss.png"):
        (tmp_path / "run" / name).write_text(name)
    one_error_line(plan_tool.main, args, *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "a_folder.png", "run"]
    assert (tmp_path / "run" / "loss.png").read_text() == "loss.png"
    assert not list((tmp_path / "a_folder.png").iterdir())


def test_png_replaces_only_a_picture_it_drew(tmp_path, capsys):
    """--png naming a file another program wrote (a user's photo.png) is one line naming a free name, before the
    plan is printed, the photo left as it was (an exploration as a new user found it: the picture was written over
    it)."""
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\nmy photo")
    one_error_line(plan_tool.main, ["--variant=gpt", f"--png={photo}"], "exists and is not a file this command wrote",
                   f"--png={tmp_path / 'photo-2.png'}")
    assert photo.read_bytes() == b"\x89PNG\r\n\x1a\nmy photo" and capsys.readouterr().out == ""


def test_gallery_replaces_only_pictures_it_drew(tmp_path, capsys):
    """--gallery=DIR holding a file of another program under a preset's name (DIR/gpt.png, a user's) is one line
    naming a new folder, before any picture is drawn (a review found it: --gallery wrote over it)."""
    (tmp_path / "gpt.png").write_bytes(b"\x89PNG\r\n\x1a\nmy photo")
    one_error_line(plan_tool.main, [f"--gallery={tmp_path}"], f"--gallery={tmp_path / 'gpt.png'} exists and is not",
                   f"--gallery={tmp_path}-2")
    assert os.listdir(tmp_path) == ["gpt.png"] and capsys.readouterr().out == ""


def test_png_takes_a_capital_extension(tmp_path, capsys):
    """--png=X.PNG is a PNG file too: drawn under that name, and drawn again over its own picture (an exploration
    as a new user found it: "the picture is a PNG file (fix: --png=FILE.png)")."""
    png = tmp_path / "X.PNG"
    for _ in range(2):
        plan_tool.main(["--variant=gpt", "--n_layer=2", f"--png={png}"])
    assert capsys.readouterr().out.count(f"wrote {png}") == 2 and os.listdir(tmp_path) == ["X.PNG"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gallery_has_every_preset():
    """docs/architectures.md shows every preset's picture (a new preset needs `tools.plan --gallery` rerun)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "architectures.md"), encoding="utf-8") as f:
        doc = f.read()
    for name in PRESETS:
        assert f"![{name}](architectures/{name}.png)" in doc
        assert 0 < os.path.getsize(os.path.join(root, "docs", "architectures", f"{name}.png")) < 100_000


def test_every_flag_set_shows_in_the_model_label():
    """tools.bench, tools.compare and tools.gpu_check label a model with describe(): its shape words, then every
    other field off its default as name=value, so two flag sets never share a label, a new field included."""
    from tools.benchmarks.measure import describe
    plain = describe(TINY)
    assert plain == "4L d16 2h vocab 37 block 16"
    labels = {name: describe({**TINY, **flags}) for name, flags in FLAGS.items()}
    same = [name for name, label in labels.items() if label == plain and name != "gpt"]
    assert not same, f"flag sets labelled as plain GPT: {same}"
    assert describe({**TINY, "norm": "rmsnorm"}) == plain + " norm=rmsnorm"


def test_bench_scaling_sorts_every_field_and_keeps_each_presets_structure():
    """tools.bench --scale: every GPTConfig field is declared width, depth or kept (a new field fails here until
    sorted), a scaled preset changes only width and depth fields, lgpt/cgpt keep their number of halvings and a
    ShishuLM split its top attention layers (both were lost before: 6 layers halved twice became 3 halved once,
    8 + 2 attention layers at half depth 3 + 2)."""
    from tools.benchmarks import entries
    from safety_net.build import gpt_config_defaults
    declared = entries.WIDTH_FIELDS + entries.DEPTH_FIELDS + entries.KEPT_FIELDS
    assert sorted(declared) == sorted(f.name for f in dataclasses.fields(GPTConfig)), (
        "fix: declare the field in tools/benchmarks/entries.py's WIDTH_FIELDS, DEPTH_FIELDS or KEPT_FIELDS")
    scaled_fields = set(entries.WIDTH_FIELDS + entries.DEPTH_FIELDS)
    for name in variants.available():
        args = {**gpt_config_defaults(), **variants.load(name)}
        scaled = entries.scale_args(args, 0.5, 0.5)
        assert {k for k in args if scaled[k] != args[k]} <= scaled_fields, name
        halvings = len(set(GPTConfig(**args).widths()))
        assert len(set(GPTConfig(**scaled).widths())) == halvings, name
    shishu = {**gpt_config_defaults(), **variants.load("shishulm_125"), "n_attn_layers": 8, "n_top_attn_layers": 2,
              "share_from_layer": 8}
    scaled = entries.scale_args(shishu, 1.0, 0.5)
    assert (scaled["n_layer"], scaled["n_attn_layers"], scaled["n_top_attn_layers"]) == (15, 4, 1)


def test_bench_depth_scale_alone_and_width_fields_rounded_to_nearest():
    """--depth_scale=0.5 with --scale=1 halves gpt's 6 layers to 3 (a hunt: a changed line scaled depth by --scale,
    and no test failed: 6 layers); a width field scales to the nearest integer: mlp_hidden 150 at n_embd 64 -> 16
    is 38 (150 / 4 = 37.5), not truncated to 37 (a hunt: a changed line did this, and no test failed)."""
    from tools.benchmarks import entries
    from safety_net.build import gpt_config_defaults
    entry = entries.variant_entry("gpt", dict(scale=1, depth_scale=0.5, batch_size=8), {})
    assert entry["args"]["n_layer"] == 3
    args = dict(gpt_config_defaults(), n_layer=2, n_embd=64, n_head=4, mlp_hidden=150, block_size=16, vocab_size=32)
    scaled = entries.width_args(args, 0.25)
    assert (scaled["n_embd"], scaled["mlp_hidden"]) == (16, 38)


def test_a_config_file_starting_from_a_checkpoint_file_takes_the_datasets_vocabulary(tmp_path, monkeypatch):
    """init_from=<a checkpoint file> (fine-tuning on another dataset) sizes the vocabulary by the dataset, as
    train.py does (only resume keeps the checkpoint's): tools.plan and tools.bench read the dataset's 16 tokens,
    not the checkpoint's 37 (a hunt: a changed line did this, and no test failed)."""
    from tools.benchmarks import entries
    monkeypatch.chdir(tmp_path)
    model = GPT(GPTConfig(**TINY))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 3,
                 "best_val_loss": 1.0, "optimizer": {}}, tmp_path / "run" / "ckpt.pt")
    data = write_token_dataset(tmp_path / "data", n_train=200, n_val=100, vocab_size=16)
    (tmp_path / "ft.py").write_text(f"init_from = '{tmp_path / 'run' / 'ckpt.pt'}'\ndata_dir = '{data}'\n"
                                    f"dataset = 'synthetic'\n")
    args, _ = entries.config_file_model(str(tmp_path / "ft.py"))
    assert (args["vocab_size"], args["n_layer"]) == (16, TINY["n_layer"])


def test_every_parameter_of_every_flag_set_has_a_named_part():
    """The plan's parameter table (param_parts) names every parameter of every flag set of FLAGS (which
    test_support makes cover every GPTConfig field): a new module outside tools/plan.py's PARTS would show as
    "other"."""
    for name, flags in FLAGS.items():
        with torch.device("meta"):
            model = GPT(GPTConfig(**{**TINY, **flags}))
        assert "other" not in plan_tool.param_parts(model), name


# a config that sets each of tools/benchmarks/entries.py's DEPTH_FIELDS, for the check that scaling scales it
DEPTH_CASES = {
    "n_layer": dict(n_layer=12),
    "n_attn_layers": dict(n_layer=12, n_attn_layers=8),
    "n_top_attn_layers": dict(n_layer=12, n_attn_layers=6, n_top_attn_layers=2),
    "share_from_layer": dict(n_layer=12, share_group_size=2, share_from_layer=4),
    "shrink_every": dict(n_layer=12, shrink_every=4, tie_embeddings=False),
}


@pytest.mark.parametrize("field", sorted(DEPTH_CASES))
def test_bench_scaling_scales_every_depth_field(field):
    """A field declared a depth field is scaled with the depth (declaring it is not enough: depth_args must
    scale it too); a new one fails here until it has a case."""
    from tools.benchmarks import entries
    from safety_net.build import gpt_config_defaults
    assert sorted(DEPTH_CASES) == sorted(entries.DEPTH_FIELDS), "fix: a case in DEPTH_CASES for each depth field"
    args = {**gpt_config_defaults(), **TINY, "n_embd": 64, **DEPTH_CASES[field]}
    scaled = entries.scale_args(args, 1.0, 0.5)
    assert scaled[field] < args[field], (field, args[field], scaled[field])


# --- what the command prints and refuses, held to the model (a hunt's changed lines that no test caught) ----------

SMALL = ["--n_embd=32", "--n_head=2", "--n_kv_head=2", "--block_size=16", "--vocab_size=37"]


def printed_totals(out):
    """{label: text} of the plan's totals (the lines after the table), and its header line."""
    lines = out.splitlines()
    blank = max(i for i, line in enumerate(lines) if not line.strip())
    return {line[:16].strip(): line[17:] for line in lines[blank + 1:]}, lines[0]


@pytest.mark.parametrize("argv", [["--variant=pgpt", "--n_layer=4", *SMALL], ["--n_layer=2", *SMALL],
                                  ["--variant=cgpt", "--n_layer=4", *SMALL]], ids=["pgpt", "gpt", "cgpt"])
def test_command_totals_are_the_models_numbers(argv, capsys):
    """The header's layer applications, get_num_params(), the KV cache at the full context and the training FLOPs
    the command prints are the numbers of the model it describes, built here (real weights, not the meta device)
    and measured: otherwise pgpt's header counts its layers twice, get_num_params() keeps the learned positions, the
    context's KV cache is a token short or training is 2x the forward (a hunt: a changed line did each, and no test
    failed)."""
    from tools.flops import flops_per_token
    plan_tool.main(argv)
    totals, header = printed_totals(capsys.readouterr().out)
    flags = dict(a[2:].split("=") for a in argv)
    args = {**plan_tool.MODEL_FIELDS, **variants.load(flags.pop("variant", "gpt"))}
    args.update({k: int(v) for k, v in flags.items()})
    model = GPT(GPTConfig(**args)).eval()
    cfg = model.config
    rows_per_branch = len(layer_sets(model.branches[0]))
    branches = f" x {len(model.branches)} branch" + ("es" if len(model.branches) > 1 else "")
    assert f": {rows_per_branch} layer applications{branches}, context 16" in header
    assert rows_per_branch == args["n_layer"] // len(model.branches)
    assert f"get_num_params() = {model.get_num_params():,} (without" in totals["parameters"]
    assert f"{sum(p.numel() for p in model.parameters()):,} unique" in totals["parameters"]
    cache = KVCache(cfg.block_size)
    with torch.no_grad():
        model(torch.zeros((1, 3), dtype=torch.long), cache=cache)
    assert f"; {cache_bytes(cache):,} bytes (" in totals["KV cache"]   # batch 1, max_len = block_size slots
    assert totals["FLOPs per token"].endswith(f"training 3x: {flops_per_token(model):,}")


@pytest.mark.parametrize("flags, shown, not_shown", [
    ({}, ["pre-LayerNorm "], ["enhanced", "ConvShrink", "SwiGLU", "+ bias", "in every"]),
    (FLAGS["enhanced_residual"], ["pre-LayerNorm, enhanced"], []),
    (FLAGS["swiglu"], ["SwiGLU 24"], ["gated SiLU"]),
    (FLAGS["gated_gelu"], ["gated GELU"], ["SwiGLU"]),
    (FLAGS["head_bias"], ["+ bias\n"], []),
    (FLAGS["cgpt_k1"], ["conv k=1"], ["ConvShrink"]),
    (FLAGS["cgpt_k3"], ["conv k=3", " bytes of ConvShrink inputs per sequence"], []),
    (FLAGS["deep_thinking_first_layer_1"], ["of every application in every pass,"], []),
    (FLAGS["pgpt"], ["of every application in every branch,"], ["and pass"]),
], ids=["gpt", "enhanced", "swiglu", "gated_gelu", "head_bias", "cgpt_k1", "cgpt_k3", "deep_thinking_1", "pgpt"])
def test_plan_text_names_what_the_model_has(flags, shown, not_shown):
    """The words of the table and totals follow the model: the residual column says "enhanced" only for the
    enhanced residual, SwiGLU is named so, the head line shows its bias, cgpt's kept conv inputs (the last k-1
    inputs of each Conv1d, float32) are counted only for a kernel above 1, and the weights applied count every
    pass of one thinking step; otherwise a plain GPT showed "enhanced", SwiGLU "gated SiLU", cgpt k=1 a conv state
    it does not keep, and so on (a hunt: a changed line did each, and no test failed)."""
    model = meta_model({**TINY, **flags})
    text = plan_tool.format_plan(plan_tool.read_plan(model, "m")) + "\n"
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv1d)]
    if flags.get("shrink_kernel", 1) > 1:
        expected = sum((m.kernel_size[0] - 1) * m.in_channels * 4 for m in convs)
        assert f"plus {expected:,} bytes of ConvShrink" in text
    for words in shown:
        assert words in text, words
    for words in not_shown:
        assert words not in text, words


@pytest.mark.parametrize("flag", ["--dropout=0.5", "--init_std=0.5", "--init_scheme=mitchell", "--norm_eps=0.1",
                                  "--pos_embedding=rope --rope_base=500"])
def test_a_flag_declared_to_change_no_plan_is_refused(flag, capsys):
    """A model flag tools/support.py declares of no effect on the plan (NO_EFFECT: dropout, the initialisation, a
    norm's eps, RoPE's base) is one error line naming it, and --help does not list it (an exploration as a new user
    found it: the plan was printed unchanged, headed "GPTConfig with dropout=0.5" as if it were that model's)."""
    key = flag.split()[-1][2:].split("=")[0]
    one_error_line(plan_tool.main, ["--n_layer=2", *flag.split()], f"--{key} changes nothing in the plan",
                   f"fix: drop --{key}")
    assert capsys.readouterr().out == ""
    with pytest.raises(SystemExit):
        plan_tool.main(["--help"])
    listed = capsys.readouterr().out
    assert f"--{key} " not in listed and "--n_layer " in listed and "--pos_embedding " in listed


@pytest.mark.parametrize("argv, words", [
    (["--out_dir=run", "--n_layer=8"], ["takes no --variant or model flags"]),
    (["own.py", "--out_dir=run"], ["names its model, so it takes no --out_dir"]),
    (["own.py", "--mlp_ratio=2"], ["mlp_ratio=2.0 changes nothing: mlp_hidden=1536 sizes the FFN"]),
    (["own.py", "--think_eta=0.05"], ["think_eta=0.05 is read only with Deep Thinking"]),
], ids=["checkpoint_with_flags", "config_with_out_dir", "config_mlp_ratio", "config_think_eta"])
def test_command_refuses_flags_its_model_ignores(argv, words, tmp_path, monkeypatch, capsys):
    """A flag the model it shows would ignore is one error line, before any plan: a checkpoint's model with
    --n_layer, a config file with --out_dir, --mlp_ratio where the config's mlp_hidden sizes the FFN, --think_eta
    without Deep Thinking; otherwise the plan printed ignored it without a word (a hunt: a changed line did each, and no
    test failed)."""
    monkeypatch.chdir(tmp_path)
    model = GPT(GPTConfig(**{**TINY, "n_layer": 2}))
    atomic_save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "iter_num": 3},
                tmp_path / "run" / "ckpt.pt")
    (tmp_path / "own.py").write_text("variant = 'baseline'\nvocab_size = 65\n")
    one_error_line(plan_tool.main, argv, *words)
    assert capsys.readouterr().out == ""


def test_gallery_into_an_existing_folder(tmp_path, monkeypatch, capsys):
    """--gallery rewrites the pictures of a folder that exists (docs/architectures, where they live), rather than a
    FileExistsError traceback (a hunt: a changed line did this, and no test failed). One preset here."""
    monkeypatch.setattr(variants, "available", lambda: ["gpt"])
    (tmp_path / "gpt.png").write_bytes(b"\x89PNG an old picture, Software: tools.plan")   # its mark: ours
    plan_tool.main([f"--gallery={tmp_path}"])
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'gpt.png'} (")
    assert (tmp_path / "gpt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
