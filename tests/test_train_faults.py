"""train.py when things go wrong (issue 11): bad input is refused with one `error:` line and a non-zero exit
before anything on disk changes; divergence stops the run without saving NaN weights; signals and stale
temporary files; the CPU-time note for GPU recipes. Tiny models on a synthetic dataset: seconds in all."""
import hashlib
import json
import math
import os
import re
import shutil
import signal

import pytest
import torch

from conftest import hold_lock, one_error_line
import prepare
import train
from safety_net import fileio
from safety_net import run_dir
from safety_net.checkpoint import load_checkpoint, load_model
from safety_net.configurator import UserError


def run(config, callback=None):
    return train.train({**train.DEFAULTS, **config}, explicit=set(config), callback=callback)


def argv(config):
    return [f"--{k}={v}" for k, v in config.items()]


def snapshot(directory):
    """{file name: sha256 of its bytes} of everything in `directory` (recursively)."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


def main_error(args):
    """Run train.main(args); assert it exits non-zero with one `error: ...` line, and return that line."""
    with pytest.raises(SystemExit) as e:
        train.main(args)
    message = e.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    return message


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 10-iteration run (config, out_dir) to copy; never modified."""
    from conftest import tiny_config, write_token_dataset
    root = tmp_path_factory.mktemp("finished")
    cfg = dict(tiny_config(write_token_dataset(root / "data"), root / "out"), max_iters=10, eval_interval=5)
    run(cfg)
    return cfg


def copy_run(finished, tmp_path):
    out_dir = str(tmp_path / "copy")
    shutil.copytree(finished["out_dir"], out_dir)
    return dict(finished, out_dir=out_dir)


# --- bad input: one error line, non-zero exit, nothing on disk changed -------------------------------------

@pytest.mark.parametrize("override,words", [
    (dict(data_segments="missing.npy"), ["data_segments", "missing.npy"]),
    (dict(n_layer=3), ["n_layer", "differs"]),
    (dict(weight_decay=-1.0), ["weight_decay", ">= 0"]),
    (dict(learning_rate=-1e-3), ["learning_rate must be > 0"]),   # not blamed on min_lr
    (dict(beta1=1.0), ["beta1", "[0, 1)"]),
    (dict(beta2=-0.5), ["beta2"]),
    (dict(grad_clip=-1.0), ["grad_clip"]),
    (dict(min_lr=1.0), ["min_lr"]),
    (dict(warmup_iters=-1), ["warmup_iters"]),
    (dict(max_iters=-5), ["max_iters"]),
    (dict(block_size=5000), ["block_size"]),
    (dict(dtype="fp8"), ["dtype"]),
    (dict(device="tpu"), ["device"]),
    # issue 23: out-of-range numbers and device strings torch does not know (tracebacks before)
    (dict(seed=-1), ["seed must be an integer in [0, 4294967295]"]),
    (dict(seed=2**70), ["seed must be"]),
    (dict(num_threads=-1), ["num_threads must be an integer in [0, "]),
    (dict(device="cpu:x"), ["unknown device 'cpu:x'"]),
    (dict(device="cpu:3"), ["unknown device 'cpu:3'"]),   # torch takes it, then no checkpoint loads onto it
])
def test_bad_resume_input_changes_nothing(finished, tmp_path, override, words):
    cfg = dict(copy_run(finished, tmp_path), init_from="resume", **override)
    before = snapshot(cfg["out_dir"])
    message = main_error(argv(cfg))
    assert all(w in message for w in words), message
    assert snapshot(cfg["out_dir"]) == before   # log.csv, last.pt, ckpt.pt, loss.png untouched


def test_cpu_0_is_the_cpu(finished, tmp_path):
    """--device=cpu:0 was taken as given: the run trained and saved, but its checkpoints named cpu:0, which no
    map_location reads back, so each resume or sample was refused as a damaged checkpoint."""
    from safety_net.runtime import resolve_device
    assert resolve_device("cpu:0") == torch.device("cpu")
    cfg = dict(copy_run(finished, tmp_path), init_from="resume", device="cpu:0", max_iters=12)
    assert train.main(argv(cfg))["iter_num"] == 12
    assert torch.load(os.path.join(cfg["out_dir"], "last.pt"), weights_only=True)["config"]["device"] == "cpu"


def test_data_segments_that_are_not_a_npy_file_say_so(finished, tmp_path):
    """numpy reads such a file as a pickle, refuses it and advises loading it unsafely: not passed on."""
    text = tmp_path / "segments.npy"
    text.write_text("hi\n")
    cfg = dict(copy_run(finished, tmp_path), init_from="resume", data_segments=str(text))
    message = main_error(argv(cfg))
    assert "it is not a .npy file" in message and "allow_pickle" not in message and "unsafe" not in message


def test_warmup_longer_than_the_run_names_the_fix_that_works(tiny_train_config):
    message = main_error(argv(dict(tiny_train_config, max_iters=20, lr_decay_iters=20, warmup_iters=100)))
    assert "warmup_iters" in message and "--warmup_iters=2" in message
    # the fix it names works, and so does leaving warmup_iters out
    cfg = {k: v for k, v in tiny_train_config.items() if k not in ("warmup_iters", "lr_decay_iters")}
    assert run(dict(cfg, max_iters=4, eval_interval=4))["iter_num"] == 4


def test_min_lr_above_the_learning_rate_is_refused_only_when_it_is_read(tiny_train_config):
    """min_lr is the floor of the decay: without decay it is never read (nanoGPT's finetune_shakespeare.py sets
    decay_lr=False and a min_lr above its learning_rate, which was refused here)."""
    cfg = dict(tiny_train_config, learning_rate=3e-5, min_lr=6e-5, max_iters=2, eval_interval=2)
    assert "min_lr" in main_error(argv(cfg)) and "--min_lr=3e-06" in main_error(argv(cfg))
    assert run(dict(cfg, decay_lr=False))["iter_num"] == 2


def test_the_bounds_of_the_optimizer_and_the_schedule_are_values_that_train(tiny_train_config):
    """Each bound is itself a setting that makes sense (a hunt moved each without a failing test): beta1 or beta2 0
    (no momentum), min_lr equal to learning_rate (a flat schedule), a warmup as long as the decay; a negative
    lr_decay_iters is refused."""
    from safety_net.train_config import check_settings
    config = {**train.DEFAULTS, **tiny_train_config}
    for edge in (dict(beta1=0.0), dict(beta2=0.0), dict(min_lr=config["learning_rate"]),
                 dict(warmup_iters=20, lr_decay_iters=20)):
        check_settings(dict(config, **edge))
    with pytest.raises(UserError, match="lr_decay_iters must be a number >= 0"):
        check_settings(dict(config, lr_decay_iters=-5))


def test_the_warmup_note_counts_the_iterations_that_will_run(capsys):
    """Every iteration of a short run in the warmup: a note. --eval_only trains none, and printed that note about
    iterations it would never run."""
    from safety_net.run_dir import notes_before_run
    config = dict(decay_lr=True, warmup_iters=100, max_iters=10, learning_rate=1e-3, eval_only=False)
    not_a_cpu = torch.device("meta")   # the notes after this one time a CPU step
    notes_before_run(config, not_a_cpu, 1, 1, None)
    assert "note: all 10 iterations fall in the 100-iteration warmup" in capsys.readouterr().out
    notes_before_run(dict(config, eval_only=True), not_a_cpu, 1, 1, None)
    assert capsys.readouterr().out == ""
    # a warmup as long as the run: its last iteration is still in it (lr (it + 1) / (warmup + 1) of the top)
    notes_before_run(dict(config, warmup_iters=10), not_a_cpu, 1, 1, None)
    assert "note: all 10 iterations fall in the 10-iteration warmup" in capsys.readouterr().out


def test_the_warmup_note_of_a_one_iteration_run_says_1_iteration(capsys):
    """A one-iteration run in the warmup: "the one iteration falls" (an exploration as a new user found it: "all 1
    iterations fall")."""
    from safety_net.run_dir import notes_before_run
    config = dict(decay_lr=True, warmup_iters=5, max_iters=1, learning_rate=1e-3, eval_only=False)
    notes_before_run(config, torch.device("meta"), 1, 1, None)
    assert "note: the one iteration falls in the 5-iteration warmup" in capsys.readouterr().out


def test_the_time_note_of_a_resume_counts_the_iterations_left(capsys):
    """Resumed at iteration 990 of 1000, the note said the run needs 1000 iterations (over an hour at 1 s a
    micro-step) where 10 were left (a hunt)."""
    from safety_net.run_dir import notes_before_run
    config = dict(decay_lr=False, max_iters=1000, eval_only=False, eval_interval=1000, eval_iters=3, cpu_twin="")
    cpu = torch.device("cpu")
    notes_before_run(config, cpu, 1, 1, lambda: 4.0)
    assert "needs about" in capsys.readouterr().out
    notes_before_run(config, cpu, 1, 1, lambda: 4.0, start_iter=990)
    assert "needs about" not in capsys.readouterr().out   # 10 iterations: 40 s
    notes_before_run(config, cpu, 1, 1, lambda: 4.0, start_iter=500)
    assert "500 iterations, 1 evaluation(s)" in capsys.readouterr().out


def test_out_dir_that_is_a_file(tiny_train_config, tmp_path):
    path = tmp_path / "taken"
    path.write_text("not a folder")
    message = main_error(argv(dict(tiny_train_config, out_dir=str(path / "run"))))
    assert str(path) in message and "is a file" in message
    assert path.read_text() == "not a folder"
    # a symbolic link to nothing: a FileExistsError traceback at makedirs (prepare.py's --out_dir too; a hunt)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    for out_dir in (link, link / "run"):
        message = main_error(argv(dict(tiny_train_config, out_dir=str(out_dir))))
        assert "is a symbolic link to" in message and "does not exist" in message
    one_error_line(prepare.main, ["shakespeare_char", f"--out_dir={link}"], "is a symbolic link to")


def test_a_batch_too_big_for_the_machine_fails_before_out_dir_changes(tiny_train_config, monkeypatch):
    """--batch_size=10**12 used to leave a new out_dir with .lock and log.csv behind its out-of-memory line. On a
    CPU check_batch_memory refuses it first; without that check (a GPU's path) the first batch is drawn before
    out_dir is locked and log.csv begun, and its out-of-memory line comes first."""
    message = main_error(argv(dict(tiny_train_config, batch_size=10**12)))
    assert message.startswith("error: a micro-batch of 1000000000000 x ") and "(fix: " in message
    assert not os.path.exists(tiny_train_config["out_dir"])
    # a dataset not prepared yet: it was prepared first, then the batch refused (a hunt)
    from conftest import tiny_config
    data = os.path.join(os.path.dirname(tiny_train_config["out_dir"]), "new_data")
    message = main_error(argv(dict(tiny_config(data, tiny_train_config["out_dir"]), dataset="shakespeare_char",
                                   batch_size=10**12)))
    assert "a micro-batch of" in message and not os.path.exists(data)
    monkeypatch.setattr("safety_net.starting_point.check_batch_memory", lambda *args, **kwargs: None)
    message = main_error(argv(dict(tiny_train_config, batch_size=10**12)))
    assert message.startswith("error: out of memory") and "(fix: " in message
    assert not os.path.exists(tiny_train_config["out_dir"])


def test_read_only_out_dir(tiny_train_config, tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    if os.geteuid() == 0:   # root writes into read-only folders (CI runs as root): fail the write as for a user
        from safety_net import fileio
        real = fileio.tempfile.TemporaryFile

        def refuse(*args, dir=None, **kwargs):
            if dir is not None and os.path.abspath(dir) == str(folder):
                raise PermissionError(13, "Permission denied")
            return real(*args, dir=dir, **kwargs)
        monkeypatch.setattr(fileio.tempfile, "TemporaryFile", refuse)
    try:
        message = main_error(argv(dict(tiny_train_config, out_dir=str(folder))))
    finally:
        folder.chmod(0o700)
    assert str(folder) in message and "cannot write" in message


def test_init_from_checkpoint_of_another_tokenizer_is_refused(finished, tmp_path):
    from conftest import write_token_dataset
    other = write_token_dataset(tmp_path / "other", vocab_size=12)
    cfg = dict(finished, data_dir=other, out_dir=str(tmp_path / "new"),
               init_from=os.path.join(finished["out_dir"], "ckpt.pt"))
    message = main_error(argv(cfg))
    assert "another tokenizer" in message and not os.path.exists(cfg["out_dir"])


def test_init_from_checkpoint_with_model_args_this_code_does_not_know(finished, tmp_path):
    """A checkpoint of a later code version: its unknown model_args are named, not dropped (that would train
    another model), as --init_from=resume refuses the same file."""
    path = str(tmp_path / "future.pt")
    ckpt = torch.load(os.path.join(finished["out_dir"], "ckpt.pt"), weights_only=True)
    ckpt["model_args"].update(moe_experts=4, attn_sinks=True)
    torch.save(ckpt, path)
    message = main_error(argv(dict(finished, out_dir=str(tmp_path / "new"), init_from=path)))
    assert f"{path} has model_args this model.py does not know: attn_sinks, moe_experts" in message
    assert "(fix: " in message and not os.path.exists(tmp_path / "new")


# --- divergence --------------------------------------------------------------------------------------------

def test_divergence_stops_without_saving_nan_weights(finished, tmp_path):
    cfg = dict(copy_run(finished, tmp_path), learning_rate=1e4, min_lr=0.0, grad_clip=0.0, max_iters=20)
    message = main_error(argv(cfg))
    assert "diverged" in message and "at iteration" in message and "--learning_rate" in message
    # it diverges before its first save: the copied run's checkpoints are still there, and the error says whose
    assert "nothing was saved" in message and "earlier run's" in message
    for name in ("last.pt", "ckpt.pt"):   # whatever is there now still loads: never NaN weights
        model, _ = load_model(os.path.join(cfg["out_dir"], name))
        assert all(torch.isfinite(p).all() for p in model.parameters())
    assert ("--warmup_iters" in message) == cfg.get("decay_lr", train.DEFAULTS["decay_lr"])
    # without decay_lr there is no warmup (nanoGPT's get_lr): its fix said to lengthen it (a hunt)
    message = main_error(argv(dict(cfg, decay_lr=False, warmup_iters=10)))
    assert "diverged" in message and "--warmup_iters" not in message
    # the loss is read at logged iterations only: the iteration named is where it was seen NaN (a hunt)
    message = main_error(argv(dict(cfg, log_interval=7, eval_interval=100)))
    assert "the training loss (read every 7 iterations) is nan at iteration 7" in message


def test_checkpoint_with_nan_weights_is_refused(finished, tmp_path):
    cfg = copy_run(finished, tmp_path)
    path = os.path.join(cfg["out_dir"], "last.pt")
    ckpt = torch.load(path, weights_only=True)
    next(v for v in ckpt["model"].values() if v.is_floating_point()).fill_(float("nan"))
    torch.save(ckpt, path)
    with pytest.raises(UserError, match="non-finite"):
        load_model(path)
    before = snapshot(cfg["out_dir"])
    assert "non-finite" in main_error(argv(dict(cfg, init_from="resume", max_iters=20)))
    assert snapshot(cfg["out_dir"]) == before


# --- a run into the folder of an earlier one (each untested until a hunt changed run_dir.py's lines) -----------

def scripted_val_losses(monkeypatch, losses):
    """train.py's evaluations give these val losses, one per evaluation, in order (train loss 1.0)."""
    val = iter(losses)
    monkeypatch.setattr(train, "estimate_loss", lambda run_, splits, stop: {"train": 1.0, "val": next(val)})


def test_a_new_run_in_an_earlier_runs_folder_replaces_its_ckpt_pt_once(finished, tmp_path, monkeypatch):
    """The first save of a new run replaces the earlier run's ckpt.pt (whatever its val loss); after that ckpt.pt
    changes only when val improves. The flag stayed set and every save replaced ckpt.pt: the best was lost."""
    cfg = dict(copy_run(finished, tmp_path), max_iters=3, eval_interval=1)
    scripted_val_losses(monkeypatch, [3.0, 2.0, 2.5, 2.8])   # iterations 0-3: the best at 1
    run(cfg)
    ckpt = load_checkpoint(os.path.join(cfg["out_dir"], "ckpt.pt"))
    assert ckpt["iter_num"] == 1 and ckpt["best_val_loss"] == 2.0


def test_an_earlier_runs_last_pt_alone_keeps_its_log(finished, tmp_path, monkeypatch):
    """A folder holding an earlier run's last.pt (no ckpt.pt): a new run that fails before its first save leaves
    log.csv to that last.pt (it was replaced by the failed run's rows) and says whose file is there."""
    cfg = copy_run(finished, tmp_path)
    os.remove(os.path.join(cfg["out_dir"], "ckpt.pt"))
    before = snapshot(cfg["out_dir"])
    scripted_val_losses(monkeypatch, [float("nan")])
    with pytest.raises(UserError, match=r"nothing was saved \(the last.pt in .* is an earlier run's\)"):
        run(cfg)
    assert snapshot(cfg["out_dir"]) == before


def test_a_resume_from_ckpt_pt_that_fails_says_nothing_was_saved(finished, tmp_path, monkeypatch, capsys):
    """Resumed from ckpt.pt (no last.pt), a failure before the first save: nothing was saved; not "last.pt keeps
    iteration 10" (there is none), nor an earlier run's checkpoint (it is this run's start)."""
    cfg = copy_run(finished, tmp_path)
    os.remove(os.path.join(cfg["out_dir"], "last.pt"))
    ckpt_path = os.path.join(cfg["out_dir"], "ckpt.pt")   # no evaluation recorded: NaN is not its own best
    fileio.atomic_save(dict(torch.load(ckpt_path, weights_only=True), best_val_loss=float("nan")), ckpt_path)
    scripted_val_losses(monkeypatch, [float("nan")])
    with pytest.raises(UserError) as e:
        run(dict(cfg, init_from="resume", max_iters=20))
    assert "training diverged; nothing was saved (fix:" in str(e.value)
    assert "copied last.pt" not in capsys.readouterr().out   # catch_up_ckpt follows a resume from last.pt only


def test_a_resume_replaces_a_damaged_ckpt_pt_with_last_pt(finished, tmp_path, capsys):
    cfg = copy_run(finished, tmp_path)
    ckpt_path = os.path.join(cfg["out_dir"], "ckpt.pt")
    with open(ckpt_path, "wb") as f:
        f.write(b"garbage")
    run(dict(cfg, init_from="resume", max_iters=12, eval_interval=100))
    assert "ckpt.pt could not be read: copied last.pt to it" in capsys.readouterr().out
    assert load_checkpoint(ckpt_path)["iter_num"] >= 10


def test_the_block_size_fix_fits_both_splits(tmp_path):
    """Train 10 tokens and val 2 at block_size 16: the fix named --block_size=5 (the train split's half), which the
    val split then refused in turn; the refusal names the shorter split, and its fix fits both (an exploration)."""
    from conftest import write_token_dataset
    from safety_net.dataset import check_splits
    data = write_token_dataset(tmp_path / "data", n_train=10, n_val=2, vocab_size=16)
    with pytest.raises(UserError, match="val split of .* has 2 tokens, not enough for block_size=16") as e:
        check_splits(str(data), 16, 16)
    fix = int(re.search(r"--block_size=(\d+)", str(e.value)).group(1))
    assert check_splits(str(data), 16, fix) is None


def test_a_split_must_hold_a_window_and_ids_below_the_vocabulary(tmp_path):
    """A window needs block_size + 1 tokens; an id equal to vocab_size has no row in the embedding."""
    import numpy as np
    from safety_net.dataset import split_tokens
    (tmp_path / "val.bin").write_bytes(np.arange(16, dtype=np.uint16).tobytes())
    with pytest.raises(UserError, match="has 16 tokens, not enough for block_size=16"):
        split_tokens(str(tmp_path), "val", 65, 16)
    assert split_tokens(str(tmp_path), "val", 65, 15) == 16
    with pytest.raises(UserError, match="holds token id 15, but meta.json's vocab_size is 15"):
        split_tokens(str(tmp_path), "val", 15, 8)
    assert split_tokens(str(tmp_path), "val", 16, 8) == 16


# --- resume, signals, leftovers ------------------------------------------------------------------------------

def test_resuming_a_finished_run_does_not_duplicate_its_last_eval(finished, tmp_path):
    cfg = copy_run(finished, tmp_path)
    run(dict(cfg, init_from="resume"))
    evals = [r for r in train_log(cfg["out_dir"]) if r[1] == "eval"]
    assert [r[0] for r in evals] == ["0", "5", "10"]


def train_log(out_dir):
    with open(os.path.join(out_dir, "log.csv")) as f:
        return [line.split(",")[:2] for line in f.read().splitlines()[1:]]


@pytest.fixture
def ctrl_c_handler():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def interrupt_mid_step(monkeypatch, at_call):
    """Make the at_call-th training batch fetch (inside an optimizer step) receive two Ctrl-C."""
    calls = []
    real = train.get_batch

    def get_batch(path, *args, **kwargs):
        if len(args) == 5:   # training batches pass segments; evaluation batches do not
            calls.append(1)
            if len(calls) == at_call:
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)   # the second one stops at once
        return real(path, *args, **kwargs)

    monkeypatch.setattr(train, "get_batch", get_batch)


def test_double_ctrl_c_before_any_save(tiny_train_config, monkeypatch, ctrl_c_handler, capsys):
    interrupt_mid_step(monkeypatch, at_call=4)   # call 1 is the first batch; 4 is inside step 2
    summary = run(tiny_train_config)
    out = capsys.readouterr().out
    assert summary["interrupted"] and "nothing was saved" in out and "keeps" not in out
    assert not os.path.exists(os.path.join(tiny_train_config["out_dir"], "last.pt"))


def test_double_ctrl_c_after_a_save_keeps_that_save(tiny_train_config, monkeypatch, ctrl_c_handler, capsys):
    interrupt_mid_step(monkeypatch, at_call=14)   # inside step 12; last.pt was saved at iteration 10
    assert run(tiny_train_config)["interrupted"]
    assert "last.pt keeps iteration 10" in capsys.readouterr().out
    assert load_checkpoint(tiny_train_config["out_dir"], prefer=("last.pt",))["iter_num"] == 10


def test_sigterm_saves_like_ctrl_c(tiny_train_config, capsys):
    def callback(event, info):
        if event == "iter" and info["iter_num"] == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    summary = run(tiny_train_config, callback)
    assert summary["interrupted"] and summary["iter_num"] == 5
    assert load_checkpoint(tiny_train_config["out_dir"], prefer=("last.pt",))["iter_num"] == 5
    assert "SIGTERM" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL   # handler removed after the run


def test_stale_temp_files_are_removed_and_reported(finished, tmp_path, capsys):
    cfg = copy_run(finished, tmp_path)
    stale = os.path.join(cfg["out_dir"], ".last.pt.k3j9x1.tmp")
    other = os.path.join(cfg["out_dir"], "notes.tmp")   # not ours: kept
    for path in (stale, other):
        with open(path, "wb") as f:
            f.write(b"\0" * 2_000_000)
    run(dict(cfg, init_from="resume", max_iters=12))
    assert "removed 1 temporary file(s) (2.0 MB)" in capsys.readouterr().out
    assert not os.path.exists(stale) and os.path.exists(other)


# --- a new run into the folder of a finished one (issue 23) ----------------------------------------------------

def without_lock(files):
    return {k: v for k, v in files.items() if k != fileio.LOCK_NAME}


def test_resume_with_a_damaged_log_is_one_line(finished, tmp_path):
    """log.csv overwritten with bytes that are not text (it used to end in a UnicodeDecodeError traceback)."""
    cfg = copy_run(finished, tmp_path)
    with open(os.path.join(cfg["out_dir"], "log.csv"), "wb") as f:
        f.write(b"\xff\xfe\x00garbage\n")
    before = without_lock(snapshot(cfg["out_dir"]))
    message = main_error(argv(dict(cfg, init_from="resume", max_iters=20)))
    assert f"{cfg['out_dir']}/log.csv is damaged" in message and "(fix: delete it" in message
    assert without_lock(snapshot(cfg["out_dir"])) == before


def test_resume_with_log_rows_that_are_not_numbers(finished, tmp_path, capsys):
    """A log.csv row edited to text where a number goes (it used to end, after saving last.pt, in a ValueError
    traceback while drawing loss.png): the row is left out with a note, the run and loss.png complete."""
    cfg = copy_run(finished, tmp_path)
    path = os.path.join(cfg["out_dir"], "log.csv")
    with open(path, newline="") as f:
        lines = f.read().splitlines(keepends=True)
    fields = lines[3].split(",")
    fields[2] = "oops"   # the loss column
    lines[3] = ",".join(fields)
    with open(path, "w", newline="") as f:
        f.writelines(lines)
    os.remove(os.path.join(cfg["out_dir"], "loss.png"))
    run(dict(cfg, init_from="resume", max_iters=12))
    assert "left out 1 row(s) whose values are not numbers (line 4 first)" in capsys.readouterr().out
    assert os.path.isfile(os.path.join(cfg["out_dir"], "loss.png"))
    with open(path) as f:
        assert "oops" not in f.read()


def test_an_eval_only_run_into_a_new_out_dir_writes_no_log(finished, tmp_path, capsys):
    """--eval_only of another run's checkpoint into a new out_dir: the losses are printed, and no log.csv or loss.png
    is left without the checkpoint they would go with."""
    cfg = dict(finished, out_dir=str(tmp_path / "fresh" / "a" / "b"),
               init_from=os.path.join(finished["out_dir"], "ckpt.pt"), eval_only=True)
    (tmp_path / "kept").mkdir()   # an empty folder of the user's, above out_dir: it stays
    run(dict(cfg, out_dir=str(tmp_path / "kept" / "run")))
    run(cfg)
    out = capsys.readouterr().out
    assert "val loss" in out and "wrote no log.csv or loss.png" in out
    # it was left holding its lock file alone, and then the folders above it that it made (hunts)
    assert not os.path.exists(tmp_path / "fresh") and os.listdir(tmp_path / "kept") == []


def test_a_run_of_max_iters_0_writes_no_log_without_a_checkpoint(finished, tmp_path, capsys):
    """max_iters=0 evaluates and saves nothing (saves come after iteration 0): it wrote log.csv and loss.png with
    no checkpoint beside them, which its closing line then did not say."""
    cfg = dict(finished, out_dir=str(tmp_path / "zero"), max_iters=0)
    run(cfg)
    assert "wrote no log.csv or loss.png" in capsys.readouterr().out
    assert not os.path.exists(cfg["out_dir"])


def test_an_eval_only_resume_changes_nothing_in_out_dir(finished, tmp_path, capsys):
    """--eval_only on a resumed run saves no checkpoint, so log.csv and loss.png stay as they were (it appended
    its evaluation's row to log.csv and redrew loss.png)."""
    cfg = copy_run(finished, tmp_path)
    before = without_lock(snapshot(cfg["out_dir"]))
    run(dict(cfg, init_from="resume", eval_only=True))
    assert "this run saved no checkpoint" in capsys.readouterr().out
    assert without_lock(snapshot(cfg["out_dir"])) == before


@pytest.mark.parametrize("how", ["max_iters=0", "killed before its first save"])
def test_a_new_run_that_saves_nothing_keeps_the_earlier_runs_log(finished, tmp_path, capsys, how):
    """log.csv and loss.png go with the checkpoints beside them: a new run that writes no checkpoint leaves the
    earlier run's, and says so (they used to be replaced, under the old run's checkpoints)."""
    cfg = copy_run(finished, tmp_path)
    before = without_lock(snapshot(cfg["out_dir"]))

    class Killed(Exception):
        pass

    def kill(event, info):
        if event == "iter" and info["iter_num"] == 3:
            raise Killed

    if how == "max_iters=0":
        run(dict(cfg, max_iters=0))
        assert "this run saved no checkpoint: kept log.csv and loss.png" in capsys.readouterr().out
    else:
        with pytest.raises(Killed):
            run(cfg, callback=kill)
    assert without_lock(snapshot(cfg["out_dir"])) == before   # no temporary log left behind either


def test_a_new_runs_first_save_replaces_the_earlier_runs_files(finished, tmp_path, ctrl_c_handler):
    """Stopped with Ctrl-C before its first evaluation's save, a new run saves last.pt; ckpt.pt and log.csv become
    its own at that moment too, so the folder never mixes two runs."""
    cfg = copy_run(finished, tmp_path)

    def ctrl_c(event, info):
        if event == "iter" and info["iter_num"] == 3:
            os.kill(os.getpid(), signal.SIGINT)

    assert run(dict(cfg, max_iters=20, eval_interval=10), ctrl_c)["interrupted"]
    for name in ("ckpt.pt", "last.pt"):
        assert load_checkpoint(os.path.join(cfg["out_dir"], name))["iter_num"] == 3
    assert [r[0] for r in train_log(cfg["out_dir"])] == ["0", "0", "1", "2"]   # eval 0, then train 0-2


@pytest.mark.parametrize("how", ["a new run", "--eval_only"])
def test_a_stop_before_any_training_step_keeps_the_earlier_runs_files(finished, tmp_path, monkeypatch, ctrl_c_handler,
                                                                      capsys, how):
    """Ctrl-C in the evaluation at iteration 0 (a new run's, or an --eval_only run's, as nanoGPT's eval_gpt2.py)
    saved the weights it started from as ckpt.pt and last.pt over an earlier run's (a hunt): nothing trained,
    nothing saved."""
    cfg = copy_run(finished, tmp_path)
    before = without_lock(snapshot(cfg["out_dir"]))
    real = train.get_batch

    def get_batch(path, *args, **kwargs):
        if len(args) == 4:   # an evaluation batch: the first evaluation
            os.kill(os.getpid(), signal.SIGINT)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(train, "get_batch", get_batch)
    more = dict(eval_only=True, init_from=finished["out_dir"]) if how == "--eval_only" else {}
    summary = run(dict(cfg, **more))
    assert summary["interrupted"] and summary["iter_num"] == 0
    assert "before any training step: nothing was saved" in capsys.readouterr().out
    assert without_lock(snapshot(cfg["out_dir"])) == before


def test_a_new_run_in_an_earlier_runs_folder_says_so_at_its_start(finished, tmp_path, capsys):
    """A new run into a folder holding a trained run names the folder and that run's iteration on stderr, before
    its first save replaces them, with the fix (an exploration as a new user found it: the earlier run's
    checkpoints, log.csv and loss.png were replaced without a word at the start)."""
    cfg = copy_run(finished, tmp_path)
    run(dict(cfg, max_iters=1, eval_interval=1))
    err = capsys.readouterr().err
    assert f"note: {cfg['out_dir']} holds an earlier run's last.pt (iteration 10): this new run replaces" in err
    assert "(fix: another --out_dir, or --init_from=resume to continue it)" in err
    cfg = copy_run(finished, tmp_path / "again")
    run(dict(cfg, max_iters=0))   # saves nothing, so replaces nothing: no note (a review)
    assert "holds an earlier run" not in capsys.readouterr().err


def test_an_eval_only_run_from_scratch_says_the_checkpoint_is_not_read(finished, tmp_path, capsys):
    """--eval_only without --init_from=resume in a trained run's folder evaluates fresh weights, and says on
    stderr that the checkpoint there is not read, with the fix (an exploration as a new user found it: it
    reported the fresh model's val loss with no word that out_dir's checkpoint was not read)."""
    cfg = copy_run(finished, tmp_path)
    run(dict(cfg, eval_only=True))
    last = os.path.join(cfg["out_dir"], "last.pt")
    assert (f"note: --eval_only evaluates a model initialized from scratch; {last} is not read (fix: "
            f"--init_from=resume to evaluate it)") in capsys.readouterr().err
    run(dict(cfg, eval_only=True, init_from="resume"))   # the fix: it reads the checkpoint, no note
    assert "note:" not in capsys.readouterr().err


def test_a_one_iteration_run_says_1_iteration(tiny_train_config, capsys):
    """The closing line of a one-iteration run says "1 iteration" (an exploration as a new user found it: it
    said "1 iterations")."""
    run(dict(tiny_train_config, max_iters=1))
    assert ", 1 iteration in " in capsys.readouterr().out


# --- one writer per out_dir (issue 23) ------------------------------------------------------------------------

def test_a_second_writer_into_an_out_dir_is_refused(finished, tmp_path):
    cfg = copy_run(finished, tmp_path)
    with open(os.path.join(cfg["out_dir"], ".last.pt.k3j9x1.tmp"), "wb") as f:   # the holder's save in progress
        f.write(b"\0" * 1000)
    holder = hold_lock(cfg["out_dir"])
    try:
        before = snapshot(cfg["out_dir"])
        for second in (dict(cfg, init_from="resume", max_iters=20), cfg):   # a resume, and a new run from scratch
            message = main_error(argv(second))
            assert f"out_dir '{cfg['out_dir']}' is being written by another process (pid {holder.pid})" in message
            assert "(fix: " in message and snapshot(cfg["out_dir"]) == before   # its temporary file too
    finally:
        holder.kill()
        holder.wait()


def test_the_out_dir_lock_never_outlives_its_writer(finished, tmp_path):
    """Killed with SIGKILL, the holder has no chance to release anything: the lock dies with it. A run releases
    it when it ends, also when it fails."""
    cfg = copy_run(finished, tmp_path)
    holder = hold_lock(cfg["out_dir"])
    holder.kill()
    holder.wait()
    assert run(dict(cfg, init_from="resume", max_iters=12))["iter_num"] == 12
    fileio.lock_dir(cfg["out_dir"]).close()
    assert "diverged" in main_error(argv(dict(cfg, learning_rate=1e4, min_lr=0.0, grad_clip=0.0, max_iters=20)))
    fileio.lock_dir(cfg["out_dir"]).close()


def test_no_prepare_writes_the_dataset_a_run_reads(tmp_path):
    """train.py reads train.bin at every batch: a prepare --force of its folder meanwhile changed the run's data
    under it, or removed it (a hunt). The run holds a reading lock on the folder (fileio.lock_for_reading): the
    prepare is refused in one line and changes nothing, and writes once the run is over. A prepare at work (its
    writer lock) refuses a run in one line, before its out_dir exists."""
    from conftest import tiny_config
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("to be or not to be, that is the question\n" * 40)
    second.write_text("all the world's a stage, and all the men and women merely players\n" * 40)
    data = tmp_path / "data"
    prepare.main([f"--input={first}", f"--out_dir={data}"])
    force = [f"--input={second}", f"--out_dir={data}", "--force"]
    refused = []

    def callback(event, info):
        if event == "iter" and info["iter_num"] == 2:
            before = snapshot(data)
            refused.append(one_error_line(prepare.main, force, "is being read by a training run"))
            assert snapshot(data) == before
            fileio.lock_for_reading(str(data)).close()   # readers do not exclude each other (two runs on it)

    cfg = tiny_config(data, tmp_path / "out")
    assert run(cfg, callback=callback)["iter_num"] == cfg["max_iters"] and len(refused) == 1
    prepare.main(force)   # the run over: written
    assert json.loads((data / "meta.json").read_text())["text"]["path"] == str(second)
    holder = hold_lock(str(data))   # a prepare at work
    try:
        message = main_error(argv(dict(cfg, out_dir=tmp_path / "later")))
        assert f"'{data}' is being written by another process (pid {holder.pid})" in message
        assert not (tmp_path / "later").exists()
    finally:
        holder.kill()
        holder.wait()


# --- a GPU recipe on a CPU (issue 13) ---------------------------------------------------------------------

def test_gpu_recipe_on_cpu_names_time_and_twin(tiny_train_config, monkeypatch, capsys):
    """A run timed at over half an hour names the CPU twin; --eval_only's time is its one evaluation."""
    monkeypatch.setattr(run_dir, "PROGRESS_EVERY_S", 0)   # show evaluation progress at every batch
    monkeypatch.setattr(run_dir, "time_one_sequence", lambda *args: 1000.0)   # a slow CPU, as timed
    cfg = dict(tiny_train_config, max_iters=10 ** 8, eval_only=True, cpu_twin="config/gpt_shakespeare_cpu.py")
    run(cfg)
    out = capsys.readouterr().out
    note = [line for line in out.splitlines() if line.startswith("note: ")]
    assert len(note) == 1 and "GPU recipe" in note[0] and "config/gpt_shakespeare_cpu.py" in note[0]
    assert "0 iterations, 1 evaluation(s)" in note[0]
    assert "evaluating: val batch 2/2" in out


def test_ctrl_c_during_a_long_evaluation_stops_at_once(tiny_train_config, monkeypatch, ctrl_c_handler, capsys):
    evals = []
    real = train.get_batch

    def get_batch(path, *args, **kwargs):
        if len(args) == 4:   # an evaluation batch
            evals.append(1)
            if len(evals) == 5:   # inside the evaluation at iteration 10 (4 batches per evaluation)
                os.kill(os.getpid(), signal.SIGINT)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(train, "get_batch", get_batch)
    summary = run(tiny_train_config)
    assert summary["interrupted"] and summary["iter_num"] == 10 and len(evals) == 5   # stopped there, not at 8
    assert load_checkpoint(tiny_train_config["out_dir"], prefer=("last.pt",))["iter_num"] == 10
    assert "saved" in capsys.readouterr().out


# --- the other entry points: the same classes of bad input ---------------------------------------------------

@pytest.mark.parametrize("script", ["sample", "tools.eval"])
def test_data_dir_of_another_tokenizer_is_refused(finished, tmp_path, script):
    from conftest import write_token_dataset
    module = __import__(script, fromlist=["main"])
    other = write_token_dataset(tmp_path / "other", vocab_size=12)
    with pytest.raises(SystemExit) as e:
        module.main([f"--out_dir={finished['out_dir']}", f"--data_dir={other}", "--device=cpu"])
    assert str(e.value.code).startswith("error: ") and "another tokenizer" in str(e.value.code)


def test_config_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.py"
    path.write_bytes("out_dir = 'caf\xe9'\n".encode("latin-1"))
    message = main_error([str(path)])
    assert str(path) in message and "UTF-8" in message


@pytest.mark.parametrize("script,args,words", [
    ("tools.pangu.compact_vocab", ["shakespeare", "--vocab_size", "0"], ["vocab_size", "0"]),   # not "the full vocabulary"
    ("prepare", ["shakespeare_char", "--input", "EMPTY"], ["is empty"]),
    ("prepare", ["shakespeare_char", "--input", "LATIN1"], ["not UTF-8"]),
    ("tools.pangu.compact_vocab", ["shakespeare_v300", "--input", "LATIN1"], ["not UTF-8"]),
])
def test_prepare_refuses_nonsense(tmp_path, script, args, words):
    prepare = __import__(script, fromlist=["main"])
    (tmp_path / "EMPTY").write_text("")
    (tmp_path / "LATIN1").write_bytes("caf\xe9\n".encode("latin-1"))
    args = [str(tmp_path / a) if a in ("EMPTY", "LATIN1") else a for a in args]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        prepare.main(args + ["--out_dir", str(out)])
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message and all(w in message for w in words), message
    assert not out.exists() or not os.listdir(out)   # nothing half-written


@pytest.mark.parametrize("damage,words", [
    ("meta_not_json", ["meta.json", "not readable JSON"]),
    ("odd_bin", ["train.bin", "odd number of bytes"]),
    ("id_too_large", ["token id 40", "vocab_size is 16"]),
    ("empty_val", ["val split", "0 token(s), nothing to score"]),
    # cut short to an even size: trained without a word (a hunt); meta.json records each split's tokens
    ("cut_short", ["train.bin holds 19,998 tokens", "records 20,000"]),
    # a vocabulary that cannot be read back: trained, then failed at sampling (a hunt)
    ("chars_short", ["meta.json's chars", "distinct characters"]),
])
def test_corrupt_dataset_is_one_line(tiny_train_config, damage, words):
    data_dir = tiny_train_config["data_dir"]
    if damage == "cut_short":
        meta_path = os.path.join(data_dir, "meta.json")
        meta = json.load(open(meta_path))
        json.dump(dict(meta, splits={"train": {"tokens": 20000}, "val": {"tokens": 4000}}), open(meta_path, "w"))
        os.truncate(os.path.join(data_dir, "train.bin"), 2 * 19998)
    elif damage == "chars_short":
        meta_path = os.path.join(data_dir, "meta.json")
        meta = json.load(open(meta_path))
        json.dump(dict(meta, chars=meta["chars"][:-1]), open(meta_path, "w"))
    elif damage == "meta_not_json":
        with open(os.path.join(data_dir, "meta.json"), "w") as f:
            f.write("{not json")
    elif damage == "odd_bin":
        with open(os.path.join(data_dir, "train.bin"), "ab") as f:
            f.write(b"\0")
    elif damage == "id_too_large":
        with open(os.path.join(data_dir, "train.bin"), "r+b") as f:
            f.write(bytes([40, 0]))
    else:
        open(os.path.join(data_dir, "val.bin"), "wb").close()
    message = main_error(argv(tiny_train_config))
    assert all(w in message for w in words), message
    assert not os.path.exists(tiny_train_config["out_dir"])


@pytest.mark.parametrize("damage,words", [
    ("bad_model_args", ["model_args", "do not fit this model.py"]),
    ("weights_mismatch", ["do not fit its own model_args"]),
])
def test_damaged_checkpoint_is_one_line_in_sample(finished, tmp_path, damage, words):
    import sample
    cfg = copy_run(finished, tmp_path)
    path = os.path.join(cfg["out_dir"], "ckpt.pt")
    ckpt = torch.load(path, weights_only=True)
    if damage == "bad_model_args":
        ckpt["model_args"]["n_head"] = 3   # 32 is not divisible by 3: GPTConfig refuses it
    else:
        ckpt["model"].pop(next(iter(ckpt["model"])))
    torch.save(ckpt, path)
    with pytest.raises(SystemExit) as e:
        sample.main([f"--out_dir={path}", "--device=cpu", "--num_samples=1", "--max_new_tokens=2"])
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message and all(w in message for w in words), message


def test_bench_out_to_a_missing_folder_fails_before_measuring(tmp_path, monkeypatch, capsys):
    """tools/bench.py --out checks its folder first (it used to fail only after all measurements)."""
    from tools import bench
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "missing" / "bench.md"
    message = one_error_line(bench.main, [f"--out={out}", "--device=cpu"])
    assert message.startswith("error: --out=") and capsys.readouterr().out == ""
    assert not out.parent.exists()


def test_bench_out_refuses_a_file_it_did_not_write(tmp_path, monkeypatch, capsys):
    """--out=README.md (or a .csv of one's own) was replaced by bench's tables without a word; a file bench wrote,
    or an empty one, is still replaced."""
    from tools import bench
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.md").write_text("# my notes\n")
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    (tmp_path / "old.md").write_text("bench: torch 2.13.0, device cpu\n")
    (tmp_path / "old.csv").write_text("model,params,batch,seq\n")
    for name, example in [("notes.md", "bench.md"), ("data.csv", "bench.csv")]:
        with pytest.raises(SystemExit) as e:
            bench.main([f"--out={name}", "--dry_run"])
        assert str(e.value.code).startswith(f"error: --out={name} exists and is not a file this command wrote")
        assert f"--out={example}" in str(e.value.code)
    assert (tmp_path / "notes.md").read_text() == "# my notes\n"
    for name in ("old.md", "old.csv"):
        bench.main([f"--out={name}", "--dry_run"])   # its own file: accepted
        # and left as it is, which a dry run said nothing of (a hunt)
        assert f"--dry_run: nothing measured, {name} not written" in capsys.readouterr().out


def test_bench_bad_input_is_a_user_error_turned_into_one_line_by_main():
    """bench.py's checks raise UserError; only its main() turns it into `error: ... (fix: ...)` and exit code 1."""
    from tools import bench
    with pytest.raises(UserError, match="unknown measure"):
        bench.parse(["--measure=nope"])
    with pytest.raises(SystemExit) as e:
        bench.main(["--scale=0"])
    message = str(e.value.code)
    assert message.startswith("error: --scale must be > 0") and "(fix:" in message and "\n" not in message


def test_bench_refuses_a_key_that_no_chosen_measure_reads():
    """--measure=infer took --compile, --optimizer_step=False and --gen_tokens and changed nothing (a hunt)."""
    from tools import bench
    for key, measure in (("--compile", "infer"), ("--optimizer_step=False", "sample"), ("--gen_tokens=3", "infer"),
                         ("--batch_size=2", "decode"), ("--seq_lens=8", "sample"), ("--repeats=99", "sample"),
                         ("--warmup=50", "sample"), ("--max_step_seconds=1e-6", "infer")):
        with pytest.raises(UserError, match=f"changes nothing in --measure={measure}"):
            bench.parse([f"--measure={measure}", key, "--dry_run"])
    cfg, _ = bench.parse(["--measure=train", "--compile", "--batch_size=2", "--seq_lens=8", "--dry_run"])
    assert cfg["compile"] and cfg["batch_size"] == 2
    bench.parse(["--mode=paper001", "--dry_run"])   # a mode's own keys are not the command line's
    # pgpt's option on models without branches (technique_lines refuses it too)
    with pytest.raises(UserError, match="no model here has branches"):
        bench.parse(["--variants=gpt,lgpt", "--measure=sample", "--keep_heaviest_branch", "--dry_run"])
    bench.parse(["--variants=gpt,pgpt", "--measure=sample", "--keep_heaviest_branch", "--dry_run"])



def test_a_run_refused_the_lock_removes_nothing_of_the_folder(tmp_path, monkeypatch):
    """A run that made no folder itself, or was refused its lock, leaves the folder alone: another run made it a
    moment before and holds it (it would have removed that run's lock and folder; a review)."""
    from safety_net import run_dir
    out_dir = tmp_path / "new"
    monkeypatch.chdir(tmp_path)   # a RunDir of no data_dir locked the current folder's .lock (a review)

    def another_run_took_it(path, key="out_dir"):
        os.makedirs(path)
        (out_dir / ".lock").write_text("4242")
        raise UserError(f"{key} '{path}' is being written by another process (pid 4242)")

    monkeypatch.setattr(run_dir, "lock_dir", another_run_took_it)
    config = dict(train.DEFAULTS, out_dir=str(out_dir), device="cpu", dtype="float32")
    with pytest.raises(UserError, match="another process"):
        with run_dir.RunDir(config, 0, None, 0, 1, torch.device("cpu")):
            pass
    assert os.listdir(out_dir) == [".lock"] and not (tmp_path / ".lock").exists()


def test_schedule_keys_set_without_decay_lr_get_a_note(capsys):
    """decay_lr=False: the lr is learning_rate throughout, so a --warmup_iters, --lr_decay_iters or --min_lr the
    user set was accepted and dropped without a word (as nanoGPT does). A note names each one set; none for the
    filled defaults, with decay_lr, or for --eval_only (it trains nothing)."""
    from safety_net.run_dir import notes_before_run
    config = dict(decay_lr=False, learning_rate=1e-3, warmup_iters=100, lr_decay_iters=50, min_lr=1e-4,
                  max_iters=50, eval_only=False)
    not_a_cpu = torch.device("meta")   # the notes after this one time a CPU step
    notes_before_run(config, not_a_cpu, 1, 1, None, explicit={"warmup_iters", "min_lr", "batch_size"})
    out = capsys.readouterr().out
    assert "note: decay_lr=False: the lr is 0.001 throughout, and warmup_iters, min_lr are not read" in out
    assert "lr_decay_iters" not in out and "--decay_lr=True" in out
    notes_before_run(config, not_a_cpu, 1, 1, None, explicit={"min_lr"})
    assert "min_lr is not read" in capsys.readouterr().out
    for quiet in (config, dict(config, eval_only=True)):
        notes_before_run(quiet, not_a_cpu, 1, 1, None, explicit={"batch_size"} if quiet is config else {"min_lr"})
        assert capsys.readouterr().out == ""
    notes_before_run(dict(config, decay_lr=True, warmup_iters=5), not_a_cpu, 1, 1, None, explicit={"min_lr"})
    assert "not read" not in capsys.readouterr().out


def test_the_unread_schedule_note_reaches_a_real_run(tiny_train_config, capsys):
    """train.py's command line hands say_what_runs the keys the user set."""
    cfg = {k: v for k, v in tiny_train_config.items() if k not in ("lr_decay_iters", "min_lr")}
    train.main(argv(dict(cfg, decay_lr=False, warmup_iters=3, max_iters=2, eval_interval=2)))
    assert "note: decay_lr=False: the lr is 0.003 throughout, and warmup_iters is not read" in capsys.readouterr().out


def test_compile_on_a_cpu_without_a_cpp_compiler_is_one_line(tiny_train_config, tmp_path, monkeypatch):
    """inductor builds C++ on the CPU: without a compiler, train.py --compile=True and tools.fast_sample failed at
    their first compiled call, in a 150-line traceback, train.py leaving log.csv behind (a hunt). One line now,
    before anything is written; the fix it names, --compile=False, trains."""
    from conftest import one_error_line
    import torch._inductor.cpp_builder as cpp_builder
    from tools import eval as evaluate
    from tools import fast_sample

    def no_compiler():
        raise cpp_builder.exc.InvalidCxxCompiler()

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    cfg = dict(tiny_train_config, compile=True, max_iters=2, eval_interval=2)
    one_error_line(train.main, argv(cfg), "torch.compile on the CPU needs a C++ compiler", "--compile=False")
    assert not os.path.exists(cfg["out_dir"])
    assert run(dict(cfg, compile=False))["iter_num"] == 2
    one_error_line(fast_sample.main, [f"--out_dir={cfg['out_dir']}", "--device=cpu"], "needs a C++ compiler",
                   "python sample.py")
    one_error_line(evaluate.main, [f"--out_dir={cfg['out_dir']}", "--device=cpu", "--compile=True"],
                   "needs a C++ compiler", "--compile=False")


@pytest.mark.parametrize("key, value, words", [
    ("rope_base", 500000.0, "read only with RoPE (--pos_embedding=rope)"),
    ("think_eta", 0.05, "read only with Deep Thinking (--think_steps=3)"),
    ("think_memory", "first_layer", "read only with Deep Thinking"),
    ("residual_logit_init", 1.0, "read only with the enhanced residual (--enhanced_residual=True)"),
    ("shrink_layer", "conv", "read only with lgpt/cgpt's width halving (--shrink_every=2)"),
])
def test_a_model_key_its_model_never_reads_is_refused(tiny_train_config, key, value, words):
    """Each acts only under another field: set with that one off it was accepted, saved in the checkpoint and changed
    nothing (losses identical; a hunt). One line before anything is written; the fix it names (add the other) runs,
    and so does a config that sets both."""
    from safety_net.build import model_args
    cfg = dict(tiny_train_config, max_iters=2, eval_interval=2, **{key: value})
    message = main_error(argv(cfg))
    assert words in message and f"drop {key}" in message
    assert not os.path.exists(cfg["out_dir"])
    on = {"rope_base": dict(pos_embedding="rope"), "think_eta": dict(think_steps=2),
          "think_memory": dict(think_steps=2), "residual_logit_init": dict(enhanced_residual=True),
          "shrink_layer": dict(shrink_every=1, n_head=1, tie_embeddings=False)}[key]
    assert run(dict(cfg, **on))["iter_num"] == 2
    with pytest.raises(UserError, match=words.split(" (")[0]):   # tools.compare / bench / plan's model_args
        model_args({key: value}, {key})


# --- starting_point.py's lines no test caught (a short hunt) ----------------------------------------------------

def test_a_resume_below_its_iteration_evaluates_with_eval_only(finished, tmp_path):
    """The fix the refusal names, --eval_only=True, is taken: it was refused by the same check (a hunt)."""
    cfg = copy_run(finished, tmp_path)
    assert "--eval_only=True to evaluate it" in main_error(argv(dict(cfg, init_from="resume", max_iters=2)))
    summary = run(dict(cfg, init_from="resume", max_iters=2, eval_only=True))
    assert summary["iter_num"] == 10 and math.isfinite(summary["best_val_loss"])


def test_a_vocab_size_below_the_datas_names_vocab_size(tiny_train_config):
    """Below the dataset's vocabulary, the fix is to drop --vocab_size (the data is right): the split check named
    the token files instead, with prepare.py's fix, when this check was off by one."""
    from safety_net.dataset import load_meta
    vocab = load_meta(tiny_train_config["data_dir"])["vocab_size"]
    message = main_error(argv(dict(tiny_train_config, vocab_size=vocab - 1)))
    assert f"vocab_size {vocab - 1} is smaller than the dataset's {vocab} tokens" in message


def test_a_damaged_last_pt_without_a_ckpt_pt_names_no_missing_file(finished, tmp_path):
    """A damaged last.pt beside a whole ckpt.pt: resume from that (its fix); without one, the fix names no file
    that is not there."""
    cfg = copy_run(finished, tmp_path)
    last = os.path.join(cfg["out_dir"], "last.pt")
    with open(last, "r+b") as f:
        f.truncate(100)
    assert "resumes from" in main_error(argv(dict(cfg, init_from="resume", max_iters=20)))
    os.remove(os.path.join(cfg["out_dir"], "ckpt.pt"))
    message = main_error(argv(dict(cfg, init_from="resume", max_iters=20)))
    assert "cannot read checkpoint" in message and "ckpt.pt" not in message
