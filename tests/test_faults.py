"""Issue 11 for the scripts beside train.py (prepare, eval, sample, pangu, huggingface) and the shared checkpoint.py / dataset.py:
bad input, damaged files and filesystem faults give one `error: ... (fix: ...)` line, a non-zero exit and leave
the files on disk as they were; data of another tokenizer never meets a model silently. The last tests cover
train.py, compare.py and bench.py cases found by the same audit. Tiny models: seconds in all."""
import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, one_error_line, tiny_config, write_token_dataset
import train
from safety_net import checkpoint
from safety_net import fileio
from safety_net.configurator import UserError, run_command
from safety_net.run_log import CsvLog


def snapshot(directory):
    """{relative path: sha256} of every file under `directory` ({} when it does not exist)."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 10-iteration tiny run on a vocab-16 dataset: its train config (never modified)."""
    root = tmp_path_factory.mktemp("finished")
    cfg = dict(tiny_config(write_token_dataset(root / "data"), root / "out"), max_iters=10, eval_interval=5)
    train.train({**train.DEFAULTS, **cfg}, explicit=set(cfg))
    return cfg


def copy_run(finished, tmp_path, edit=None):
    """A copy of the finished run's out_dir; edit(ckpt dict) changes both of its checkpoints."""
    out_dir = str(tmp_path / "run")
    shutil.copytree(finished["out_dir"], out_dir)
    for name in ("ckpt.pt", "last.pt") if edit else ():
        path = os.path.join(out_dir, name)
        ckpt = torch.load(path, weights_only=True)
        edit(ckpt)
        torch.save(ckpt, path)
    return out_dir


def entry_point(name):
    """main() of a script or module, by name."""
    return __import__(name, fromlist=["main"]).main


# --- data of another tokenizer -------------------------------------------------------------------------------

@pytest.mark.parametrize("script", ["sample", "tools.eval"])
def test_recorded_data_dir_prepared_again_with_another_tokenizer(finished, tmp_path, script):
    """The dataset folder a checkpoint recorded was prepared again since (another text, another vocabulary): its
    ids now mean other text, so sampling or scoring with it is refused (it used to crash or print wrong numbers)."""
    other = write_token_dataset(tmp_path / "prepared_again", vocab_size=12)
    out_dir = copy_run(finished, tmp_path, edit=lambda ckpt: ckpt.update(data_dir=other))
    one_error_line(entry_point(script), [f"--out_dir={out_dir}", "--device=cpu"], "prepared again", "tokenizer")


@pytest.mark.parametrize("module,args", [
    ("tools.pangu.refine", []),
    ("tools.pangu.inherit", ["--n_layer=1", "--n_embd=16", "--neurons=taylor"]),   # Taylor scores need calibration data
])
def test_pangu_tools_refuse_data_of_another_tokenizer(finished, tmp_path, module, args):
    other = write_token_dataset(tmp_path / "other", vocab_size=12)
    out_dir = copy_run(finished, tmp_path)
    before = snapshot(out_dir)
    where = [f"--out_dir={out_dir}"] if module == "tools.pangu.refine" else [f"--init_from={out_dir}",
                                                                      f"--out_dir={tmp_path / 'small'}"]
    one_error_line(entry_point(module), where + args + [f"--data_dir={other}"], "another tokenizer")
    assert snapshot(out_dir) == before and not (tmp_path / "small").exists()


def test_refined_segments_of_another_dataset_are_refused(finished, tmp_path):
    """refine.json beside refine.npy records the train split it indexes; a train split of another length
    (another dataset) is refused before anything is written."""
    from tools.pangu import refine
    out_dir = copy_run(finished, tmp_path)
    segments = refine.main([f"--out_dir={out_dir}", "--batch_size=256"])
    assert json.load(open(os.path.join(out_dir, "refine.json")))["train_tokens"] == 20000
    other = write_token_dataset(tmp_path / "longer", n_train=30000)   # same tokenizer, another text
    new_run = tmp_path / "round2"
    cfg = dict(finished, data_dir=other, out_dir=str(new_run), data_segments=segments)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "20,000 tokens", "30,000")
    assert not new_run.exists()


# --- damaged data and checkpoints ----------------------------------------------------------------------------

@pytest.mark.parametrize("damage,words", [
    ("odd_bin", ["val.bin", "odd number of bytes"]),
    ("id_too_large", ["token id 40", "vocab_size is 16"]),
    ("empty_val", ["val split", "0 token(s)"]),
])
def test_eval_damaged_split_is_one_line(finished, tmp_path, damage, words):
    data_dir = str(tmp_path / "data")
    shutil.copytree(finished["data_dir"], data_dir)
    path = os.path.join(data_dir, "val.bin")
    if damage == "odd_bin":
        with open(path, "ab") as f:
            f.write(b"\0")
    elif damage == "id_too_large":
        with open(path, "r+b") as f:
            f.write(bytes([40, 0]))
    else:
        open(path, "wb").close()
    one_error_line(entry_point("tools.eval"), [f"--out_dir={finished['out_dir']}", f"--data_dir={data_dir}",
                                         "--device=cpu"], *words)


def test_eval_multiple_choice_file_that_is_not_utf8(finished, tmp_path):
    path = tmp_path / "task.jsonl"
    path.write_bytes('{"context": "caf\xe9"}\n'.encode("latin-1"))
    one_error_line(entry_point("tools.eval"), [f"--out_dir={finished['out_dir']}", f"--mc_file={path}", "--device=cpu"],
                   str(path), "UTF-8")


@pytest.mark.parametrize("script", ["tools.huggingface.sample", "tools.eval"])
def test_hugging_face_model_with_nan_weights_is_refused(finished, tmp_path, script):
    """The NaN check of our checkpoints holds for --init_from=<Hugging Face directory> too (it used to sample
    into a torch.multinomial traceback and print a NaN table with exit code 0)."""
    hf_dir = tmp_path / "hf"
    entry_point("tools.huggingface.convert")(["export", f"--out_dir={finished['out_dir']}", f"--out={hf_dir}", "--format=bin"])
    weights = torch.load(hf_dir / "pytorch_model.bin", weights_only=True)
    next(iter(weights.values())).fill_(float("nan"))
    torch.save(weights, hf_dir / "pytorch_model.bin")
    one_error_line(entry_point(script), [f"--init_from={hf_dir}", f"--data_dir={finished['data_dir']}",
                                         "--device=cpu"], "non-finite weights")


@pytest.mark.parametrize("edit,words", [
    (lambda c: c.update(model_args="n_layer=2"), ["damaged", "'model_args' is a str"]),
    (lambda c: c.update(iter_num="ten"), ["damaged", "'iter_num'"]),
    # a name or a path that is not text: tracebacks (TypeError in join, in os.path; a hunt)
    (lambda c: c["model_args"].update({1: 2}), ["damaged", "'model_args' has a name that is not a string"]),
    (lambda c: c.update(data_dir=5), ["damaged", "'data_dir' is 5, not a string"]),
    (lambda c: c["model"].pop("ln_f.weight"), ["do not fit its own model_args", "1 missing", "ln_f.weight"]),
    (lambda c: c["model"].update(extra=torch.zeros(2)), ["do not fit its own model_args", "1 unexpected (e.g. extra)"]),
    # integer weights loaded as floats without a word (issue 23 point 5)
    (lambda c: c["model"].update({"ln_f.weight": c["model"]["ln_f.weight"].long()}),
     ["damaged", "integer tensors", "ln_f.weight"]),
    # fp8 and sparse weights: tracebacks from isfinite; iter_num -5 resumed from there (a hunt)
    (lambda c: c["model"].update({"ln_f.weight": c["model"]["ln_f.weight"].to(torch.float8_e4m3fn)}),
     ["damaged", "ln_f.weight: float8_e4m3fn, strided"]),
    (lambda c: c["model"].update({"ln_f.weight": c["model"]["ln_f.weight"].to_sparse()}),
     ["damaged", "ln_f.weight: float32, sparse_coo"]),
    (lambda c: c["model"].update({"ln_f.weight": c["model"]["ln_f.weight"].to(torch.complex64)}),
     ["damaged", "ln_f.weight: complex64, strided"]),
    (lambda c: c.update(iter_num=-5), ["damaged", "'iter_num' is -5, not an integer >= 0"]),
    # a best_val_loss that is text: train.py's resume ended in a TypeError; one NaN among finite weights (a hunt)
    (lambda c: c.update(best_val_loss="4.2"), ["damaged", "'best_val_loss' is '4.2', not a number"]),
    (lambda c: c["model"]["ln_f.weight"].__setitem__(0, float("nan")), ["non-finite weights (1 tensors"]),
])
@pytest.mark.parametrize("script", ["sample", "tools.eval"])
def test_damaged_checkpoint_names_what_is_wrong(finished, tmp_path, script, edit, words):
    out_dir = copy_run(finished, tmp_path, edit)
    one_error_line(entry_point(script), [f"--out_dir={out_dir}", "--device=cpu"], *words)


@pytest.mark.parametrize("seed", [0, 8, 69, 6])
def test_a_checkpoint_of_random_bytes_is_one_line(tmp_path, seed):
    """Garbage after the start of an old torch.save file (a pickle of torch's magic number), so that the unpickler
    reads it: it raises UnpicklingError for most bytes, but IndexError, KeyError or UnicodeDecodeError for others,
    which were tracebacks."""
    import random
    garbage = random.Random(seed).randbytes(4095)
    (tmp_path / "ckpt.pt").write_bytes(b"\x80\x02" + checkpoint.LEGACY_MAGIC + b"." + garbage)
    one_error_line(entry_point("sample"), [f"--out_dir={tmp_path}", "--device=cpu"], "cannot read checkpoint")


def test_a_file_torch_save_did_not_write_is_named_so(tmp_path):
    """Bytes that start as neither of torch.save's formats (a zip archive, a pickle) never reach the unpickler."""
    (tmp_path / "ckpt.pt").write_bytes(b"PK\x03" + bytes(4093))   # one byte short of a zip's signature
    one_error_line(entry_point("sample"), [f"--out_dir={tmp_path}", "--device=cpu"],
                   "it is not a file torch.save writes")


# --- checkpoints from others: loading never runs code from the file (issue 23) -------------------------------

class RunsCode:
    """Pickled, this becomes a call: unpickling it with the full unpickler runs `func(*args)`."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def plant(finished, tmp_path, marker):
    """A copy of the finished run whose ckpt.pt and last.pt also hold an object that creates `marker` when unpickled
    (a shared checkpoint or a cloned repository's out*/ folder), else valid."""
    return copy_run(finished, tmp_path, edit=lambda ckpt: ckpt.update(note=RunsCode(open, str(marker), "w")))


@pytest.mark.parametrize("command", ["train --init_from=<file>", "train --init_from=resume", "sample --out_dir",
                                     "sample in a folder with a planted out-x/", "eval", "huggingface.convert export",
                                     "pangu.inherit", "pangu.refine", "compare resuming"])
def test_checkpoint_that_would_run_code_is_refused(finished, tmp_path, monkeypatch, command):
    marker = tmp_path / "marker"
    run_dir = plant(finished, tmp_path, marker)

    def train_argv(**changes):
        return [f"--{k}={v}" for k, v in dict(finished, **changes).items()]

    if command == "sample in a folder with a planted out-x/":   # `python sample.py` loads the newest out*/ folder
        shutil.move(run_dir, tmp_path / "clone" / "out-x")
        monkeypatch.chdir(tmp_path / "clone")
    if command == "compare resuming":   # an interrupted model of a compare_dir resumes from its last.pt
        os.makedirs(tmp_path / "cmp" / "gpt")
        shutil.move(os.path.join(run_dir, "last.pt"), tmp_path / "cmp" / "gpt" / "last.pt")
    main, args = {
        "train --init_from=<file>": (train.main, train_argv(out_dir=tmp_path / "new",
                                                            init_from=os.path.join(run_dir, "ckpt.pt"))),
        "train --init_from=resume": (train.main, train_argv(out_dir=run_dir, init_from="resume", max_iters=20)),
        "sample --out_dir": (entry_point("sample"), [f"--out_dir={run_dir}", "--device=cpu"]),
        "sample in a folder with a planted out-x/": (entry_point("sample"), []),
        "eval": (entry_point("tools.eval"), [f"--out_dir={run_dir}", "--device=cpu"]),
        "huggingface.convert export": (entry_point("tools.huggingface.convert"),
                                       ["export", f"--out_dir={run_dir}", f"--out={tmp_path / 'hf'}"]),
        "pangu.inherit": (entry_point("tools.pangu.inherit"),
                          [f"--init_from={run_dir}", f"--out_dir={tmp_path / 'small'}", "--n_layer=1"]),
        "pangu.refine": (entry_point("tools.pangu.refine"), [f"--out_dir={run_dir}"]),
        "compare resuming": (entry_point("tools.compare"), [a for a in train_argv() if not a.startswith("--out_dir=")]
                             + ["--variants=gpt", "--bench_iters=0", f"--compare_dir={tmp_path / 'cmp'}"]),
    }[command]
    if command == "compare resuming":   # its status.json records the run (a run without its record is refused)
        from tools import compare
        runs = compare.plan(*compare.parse(args))
        record = {"state": "interrupted", "settings": compare.training_settings(runs[0])}
        (tmp_path / "cmp" / "status.json").write_text(json.dumps({"models": {runs[0].key: record}}))
    one_error_line(main, args, "refusing to load", "io.open", "would run code", "only load files you trust")
    assert not marker.exists()
    assert not (tmp_path / "new").exists() and not (tmp_path / "hf").exists() and not (tmp_path / "small").exists()


@pytest.mark.parametrize("payload,named", [((os.system, "touch {marker}"), "posix.system"),
                                           ((open, "{marker}", "w"), "io.open")])
def test_the_refusal_names_what_the_file_would_run(tmp_path, payload, named):
    """The loader itself: the message names the global, one of a module torch blocks outright (os.system) or one
    it merely does not allow (open); a damaged file is still reported as damaged, not as unsafe."""
    marker = tmp_path / "marker"
    path = tmp_path / "ckpt.pt"
    func, *args = payload
    torch.save({"model": {}, "model_args": {}, "x": RunsCode(func, *(a.format(marker=marker) for a in args))}, path)
    with pytest.raises(UserError, match=rf"refusing to load '{path}': it holds objects the safe loader refuses "
                                        rf"\({named}\).*\(fix: only load files you trust"):
        checkpoint.load_checkpoint(path)
    assert not marker.exists()
    path.write_bytes(b"\x80\x02" + checkpoint.LEGACY_MAGIC + b".\x80not a checkpoint")   # the safe loader refuses it
    with pytest.raises(UserError, match="cannot read checkpoint") as e:
        checkpoint.load_checkpoint(path)
    assert "weights_only" not in str(e.value)   # torch's advice to load it unsafely is not passed on


def test_hugging_face_weights_that_would_run_code_are_refused(finished, tmp_path):
    """pytorch_model.bin of a downloaded model directory goes through the same safe loader and the same message."""
    hf_dir, marker = tmp_path / "hf", tmp_path / "marker"
    entry_point("tools.huggingface.convert")(["export", f"--out_dir={finished['out_dir']}", f"--out={hf_dir}", "--format=bin"])
    weights = torch.load(hf_dir / "pytorch_model.bin", weights_only=True)
    torch.save(dict(weights, note=RunsCode(open, str(marker), "w")), hf_dir / "pytorch_model.bin")
    one_error_line(entry_point("tools.huggingface.sample"), [f"--init_from={hf_dir}", f"--data_dir={finished['data_dir']}",
                                           "--device=cpu"], "refusing to load", "io.open", "model.safetensors")
    assert not marker.exists()


def test_what_train_py_writes_loads_with_the_safe_loader(tmp_path):
    """A pgpt run with fp16 loss scaling (scaler state), a numpy value from a config file and a resume: every
    checkpoint it writes loads with weights_only=True (the only loader left)."""
    import numpy as np
    cfg = dict(tiny_config(write_token_dataset(tmp_path / "data"), tmp_path / "out"), variant="pgpt", dtype="float16",
               max_iters=2, eval_interval=1, min_lr=np.float64(3e-4))
    train.train({**train.DEFAULTS, **cfg}, explicit=set(cfg) - {"variant"})
    train.train({**train.DEFAULTS, **cfg, "init_from": "resume", "max_iters": 3}, explicit=set(cfg) - {"variant"})
    for name in ("ckpt.pt", "last.pt"):
        ckpt = torch.load(tmp_path / "out" / name, weights_only=True)
        assert ckpt["model_args"]["n_branches"] == 2 and ckpt["scaler"]["scale"] > 0
        assert ckpt["config"]["min_lr"] == 3e-4 and type(ckpt["config"]["min_lr"]) is float
    assert ckpt["iter_num"] == 3 and ckpt["rng"]["python"][0] == 3


# --- filesystem faults ---------------------------------------------------------------------------------------

def test_full_disk_during_torch_save_is_one_line(tmp_path, monkeypatch):
    """torch.save reports a full disk as a RuntimeError of its zip writer, raised while handling the OSError."""
    path = tmp_path / "last.pt"
    fileio.atomic_save({"v": torch.arange(3)}, path)

    def full_disk(obj, f, *args, **kwargs):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        finally:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(UserError, match="cannot write .*last.pt: No space left on device .*previous version is kept"):
        fileio.atomic_save({"v": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.equal(torch.load(path)["v"], torch.arange(3)) and os.listdir(tmp_path) == ["last.pt"]


def test_a_ctrl_c_during_torch_saves_writes_is_a_keyboard_interrupt(tmp_path, monkeypatch):
    """A second Ctrl-C that landed in torch.save's writes of last.pt at a stop gave a traceback and exit code 1
    (its zip writer's RuntimeError 'unexpected pos', raised while handling the KeyboardInterrupt), not the
    'stopped while saving' line and exit code 130 (a fuzz of stops). The previous file is kept."""
    path = tmp_path / "last.pt"
    fileio.atomic_save({"v": torch.arange(3)}, path)
    real_open = open

    class CtrlCAtThirdWrite:
        def __init__(self, f):
            self.f, self.writes = f, 0

        def write(self, data):
            self.writes += 1
            if self.writes == 3:
                raise KeyboardInterrupt
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def open_with_a_ctrl_c(*args, **kwargs):
        return CtrlCAtThirdWrite(real_open(*args, **kwargs))

    monkeypatch.setattr(fileio, "open", open_with_a_ctrl_c, raising=False)
    with pytest.raises(KeyboardInterrupt):
        fileio.atomic_save({"v": torch.zeros(1000), "w": torch.ones(1000)}, path)
    monkeypatch.undo()
    assert torch.equal(torch.load(path)["v"], torch.arange(3)) and os.listdir(tmp_path) == ["last.pt"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_while_logging_is_one_line(tmp_path):
    log = CsvLog(str(tmp_path / "log.csv"))
    log.file.close()
    log.file = open("/dev/full", "w")   # every flush fails with ENOSPC
    log.writer = __import__("csv").DictWriter(log.file, fieldnames=["iter"], extrasaction="ignore")
    with pytest.raises(UserError, match="log.csv: No space left on device .*init_from=resume"):
        log.write(iter=1)


@pytest.mark.parametrize("module,args", [
    ("prepare", ["shakespeare_char", "--out_dir", "{file}/data"]),
    ("tools.pangu.compact_vocab", ["shakespeare_v400", "--out_dir", "{file}/data"]),
    ("tools.wikitext103", ["--out_dir", "{file}/data"]),
    ("tools.pangu.inherit", ["--init_from={run}", "--out_dir={file}", "--n_layer=1"]),
    ("tools.huggingface.convert", ["export", "--out_dir={run}", "--out={file}/hf"]),
])
def test_output_folder_that_is_a_file(finished, tmp_path, module, args):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    args = [a.format(file=taken, run=finished["out_dir"]) for a in args]
    one_error_line(entry_point(module), args, str(taken), "is a file")
    assert taken.read_text() == "not a folder"


@pytest.mark.parametrize("module,args,words", [
    ("prepare", [], ["no dataset named", "--input=YOUR_TEXT.txt"]),
    ("prepare", ["wikitext103"], ["(fix: python -m tools.wikitext103)"]),
    # read by GPT-2 BPE only: a char dataset was written and the key dropped (a hunt)
    ("prepare", ["shakespeare_char", "--gpt2_ranks=/nonexistent", "--out_dir=/proc/x"],
     ["--gpt2_ranks is GPT-2's vocabulary", "tokenized by char", "--tokenizer=gpt2"]),
    ("tools.pangu.compact_vocab", ["shakespeare", "--vocab_size", "many"], ["--vocab_size", "many"]),
    ("tools.pangu.compact_vocab", ["shakespeare", "--vocab_size", "1024", "--n_layer", "-1"], ["--n_layer must be >= 1"]),
    ("tools.wikitext103", ["--vocab_size", "1024", "--n_embd", "0"], ["--n_embd must be >= 1"]),
    ("tools.bench_tokenize", ["--mb=0"], ["--mb must be > 0"]),   # used to print 0 MB/s rows
    ("tools.bench_tokenize", ["--mb=1e999"], ["--mb must be > 0 and finite, got inf"]),   # int(inf): a traceback
    ("tools.bench_tokenize", ["--input_path=nope.txt"], ["--input_path=nope.txt: no such file"]),   # was ignored
    ("tools.bench", ["--scale=1e999", "--dry_run"], ["--scale must be > 0 and --depth_scale >= 0, both finite"]),
    ("tools.bench", ["--mode=gpu"], ["unknown --mode=gpu"]),   # the GPU suite is gone: an ImportError traceback
    ("tools.bench", ["--out=bench.json", "--dry_run"], ["bench writes a .csv", "--out=bench.md"]),   # got markdown
    ("tools.bench_tokenize", ["--num_proc=-1"], ["--num_proc must be >= 1"]),
    ("tools.huggingface.convert", ["export", "--out_dir=x"], ["required: --out"]),
    ("tools.compare", ["--prompts="], ["empty prompt"]),   # sampled a section for '' (a fuzz)
    # issue 23: refused before any checkpoint is looked for (they used to sample NaN or end in a traceback)
    ("sample", ["--temperature=1e-30"], ["--temperature=1e-30 is too small", "--temperature=0 for greedy"]),
    ("sample", ["--seed=-1"], ["--seed must be an integer in [0, 4294967295], got -1"]),
    ("sample", ["--seed=99999999999999999999"], ["--seed must be"]),
    ("sample", ["--device=cpu:x"], ["unknown device 'cpu:x'"]),
    ("tools.eval", ["--device=cuda:abc"], ["unknown device 'cuda:abc'"]),
    # thread and process counts beyond the machine's CPUs: 100000 torch threads segfaulted (after starving the
    # machine of processes), a million tokenizer workers would fork until none are left; negative ones were ignored
    ("train", ["--num_threads=100000"], ["--num_threads must be an integer in [0, "]),
    ("sample", ["--num_threads=100000"], ["--num_threads must be an integer in [0, "]),
    ("tools.bench", ["--num_threads=-1", "--dry_run"], ["--num_threads must be an integer in [0, "]),
    ("tools.pangu.refine", ["--num_threads=-1"], ["--num_threads must be an integer in [0, "]),
    ("tools.wikitext103", ["--num_proc=1000000"], ["--num_proc=1000000 is more than this machine's"]),
    ("tools.bench_tokenize", ["--num_proc=1000000"], ["--num_proc=1000000 is more than this machine's"]),
    # seeds outside [0, 2**32) in bench and the pangu tools, as in train.py and sample.py (a huge one was torch's
    # overflow traceback, a negative one went through)
    ("tools.bench", ["--seed=99999999999999999999", "--dry_run"], ["--seed must be an integer in [0, 4294967295]"]),
    ("tools.pangu.refine", ["--seed=-1"], ["--seed must be an integer in [0, 4294967295]"]),
    # temperatures that are not finite numbers sampled garbage without a word (exit 0)
    ("sample", ["--temperature=1e999"], ["--temperature=inf is not a finite number"]),
    ("tools.huggingface.sample", ["--init_from=x", "--temperature=1e999"], ["--temperature=inf is not a finite"]),
    ("tools.compare", ["--sample_temperature=1e-30"], ["--sample_temperature=1e-30 is too small"]),
    ("tools.compare", ["--sample_temperature=1e999"], ["--sample_temperature=inf is not a finite number"]),
    # a fix names the value that is wrong, or the close match (a user's walkthrough: the fix named --num_samples
    # for a negative --max_new_tokens, and a mistyped --init_from or --variant listed no choice)
    ("sample", ["--max_new_tokens=-5"], ["--max_new_tokens=-5: must be >= 0", "fix: e.g. --max_new_tokens="]),
    ("sample", ["--num_samples=0"], ["--num_samples=0: must be >= 1", "fix: e.g. --num_samples=1"]),
    # sampling's other bounds, each untested until a hunt (a negative top_k was torch's "index out of range"
    # traceback; a negative temperature sampled; 1e-9 overflowed as 1e-30 does)
    ("sample", ["--top_k=-1"], ["--top_k must be >= 0", "0 means no top-k"]),
    ("sample", ["--temperature=-0.5"], ["--temperature must be >= 0, got -0.5", "0 means greedy"]),
    ("sample", ["--temperature=1e-9"], ["--temperature=1e-09 is too small"]),
    ("train", ["--init_from=Resume"], ["init_from 'Resume' does not exist", "did you mean --init_from=resume?"]),
    ("train", ["--init_from=RESUME"], ["did you mean --init_from=resume?"]),
    ("train", ["--init_from=gpt2-tiny"], ["one of: scratch, resume, gpt2, gpt2-medium"]),
    ("train", ["--variant=lgtp"], ["unknown variant 'lgtp'", "did you mean --variant=lgpt?"]),
    # a list of names given as numbers: a TypeError traceback (a hunt)
    ("tools.bench", ["--variants=1", "--dry_run"], ["unknown variant '1'"]),
    ("tools.executorch.bench", ["--shapes=1"], ["unknown variant '1'"]),
    # an unknown key without a value: "missing value", whose fix led to a second error (a hunt)
    ("sample", ["--compile"], ["unknown config key 'compile'", "nanoGPT's sample.py key"]),
    # prepare.py's key given to train.py: "see --help" named no way to train on a text
    ("train", ["--input=notes.txt"], ["unknown config key 'input'", "python prepare.py --input=FILE writes "
                                      "data/NAME; then --dataset=NAME"]),
])
def test_command_line_mistakes_are_one_line(module, args, words):
    one_error_line(entry_point(module), args, *words)


def test_output_piped_into_a_reader_that_stops_ends_quietly(finished):
    """`python sample.py | head -1`: the reader goes, the next print fails (BrokenPipeError). It was a traceback;
    now exit code 141, as SIGPIPE ends a Unix tool, and nothing on stderr but the command's own notes."""
    argv = [sys.executable, "sample.py", f"--out_dir={finished['out_dir']}", "--device=cpu", "--start=abc",
            "--num_samples=3"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()   # the reader is gone before the first line
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and b"Traceback" not in err and b"error" not in err, err.decode()


def test_a_broken_pipe_that_is_not_stdout_stays_an_error():
    """A BrokenPipeError from another pipe (a subprocess's) is not the reader of the output going: it is raised."""
    def command(config):
        raise BrokenPipeError("a subprocess's pipe")
    with pytest.raises(BrokenPipeError, match="a subprocess's pipe"):
        run_command(command, {}, [])


def test_a_nan_temperature_from_a_config_file_is_refused(tmp_path):
    """float('nan') passes `< 0` and every other comparison: it sampled NaN probabilities without a word."""
    cfg = tmp_path / "cfg.py"
    cfg.write_text("temperature = float('nan')\n")
    one_error_line(entry_point("sample"), [str(cfg)], "--temperature=nan is not a finite number")


def test_a_size_the_machine_cannot_hold_is_one_line(finished, tmp_path):
    """The allocator's refusal (a RuntimeError on a CPU, torch's OutOfMemoryError on a GPU) ends as one line in
    every run_command tool, as in train.py; --calib_batch_size=10**12 was a traceback."""
    out_dir = tmp_path / "small"
    message = one_error_line(entry_point("tools.pangu.inherit"), [
        f"--init_from={finished['out_dir']}", f"--out_dir={out_dir}", "--n_layer=1", "--n_embd=16",
        "--calib_batch_size=1000000000000"], "error: out of memory (it needed ")
    assert "GB at once" in message and not out_dir.exists()


def test_a_batch_the_machine_cannot_hold_is_one_line_before_out_dir(finished, tmp_path):
    """On a CPU the kernel killed such a run without a word, after out_dir held a lock and a log.csv (a fuzz of the
    commands): the micro-batch's logits and activations are reckoned against the memory first."""
    out_dir = tmp_path / "big"
    cfg = dict(finished, out_dir=str(out_dir), batch_size=10**9)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "a micro-batch of 1000000000 x 16 tokens",
                   "GiB of memory", "--gradient_accumulation_steps")
    assert not out_dir.exists()
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()] + ["--eval_only=True"], "a micro-batch")
    # estimate_loss's vector of losses: the allocator's line named --batch_size, after out_dir held a lock and log.csv
    cfg = dict(finished, out_dir=str(out_dir), eval_iters=10**13)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "--eval_iters=10000000000000 needs 37,253 GiB",
                   "(fix: a smaller --eval_iters")
    assert not out_dir.exists()


def test_bench_reports_a_cpu_allocation_that_fails_as_oom(tmp_path, capsys):
    """bench marks a length that does not fit as OOM, on a CPU as on a GPU (it was a traceback on a CPU)."""
    from tools import bench
    bench.main(["--variants=gpt", "--device=cpu", "--n_layer=1", "--n_embd=16", "--n_head=2", "--block_size=16",
                "--vocab_size=32", "--seq_lens=8", "--repeats=1", "--warmup=0", "--measure=train",
                "--batch_size=1000000000000"])
    assert "OOM" in capsys.readouterr().out


def test_prepare_cleans_up_after_an_interrupted_run(tmp_path, monkeypatch, capsys):
    """A prepare killed halfway must not leave new token files under the old meta.json (ids that mean other
    text); its temporary files are removed, and reported, at the next start."""
    from safety_net import text_dataset
    import prepare
    text = tmp_path / "input.txt"
    text.write_text("abc abd\n" * 200)
    out = tmp_path / "data"
    prepare.main(["shakespeare_char", "--input", str(text), "--out_dir", str(out)])
    (out / ".train.bin.x1y2.tmp").write_bytes(b"\0" * 1000)   # left by a kill -9
    text.write_text("xyz xyw\n" * 200)   # another vocabulary

    def killed(out_dir, meta):
        raise KeyboardInterrupt

    monkeypatch.setattr(text_dataset, "write_meta", killed)   # prepare.py writes through write_dataset
    with pytest.raises(SystemExit) as e:   # --force: another text may replace a dataset only when asked
        prepare.main(["shakespeare_char", "--input", str(text), "--out_dir", str(out), "--force"])
    assert e.value.code == 130   # Ctrl-C, as every command (tests/test_commands.py)
    assert "removed 1 temporary file(s)" in capsys.readouterr().out
    # no meta.json: not a complete dataset; the marker: its token files are a prepare's, replaced without --force
    assert sorted(os.listdir(out)) == [".lock", text_dataset.PREPARING, "train.bin", "val.bin"]   # .lock: its writer's
    monkeypatch.undo()
    prepare.main(["shakespeare_char", "--input", str(text), "--out_dir", str(out)])
    assert sorted(os.listdir(out)) == [".lock", "meta.json", "train.bin", "val.bin"]


# --- train.py, compare.py and bench.py cases found by the same audit ---------------------------------------

def test_resume_from_damaged_weights_is_one_line(finished, tmp_path):
    out_dir = copy_run(finished, tmp_path, edit=lambda c: c["model"].pop("ln_f.weight"))
    before = snapshot(out_dir)
    cfg = dict(finished, out_dir=out_dir, init_from="resume", max_iters=20)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "1 missing", "ln_f.weight")
    assert snapshot(out_dir) == before


def test_a_resume_whose_last_pt_is_damaged_names_the_whole_ckpt_pt(finished, tmp_path):
    """A damaged last.pt's fix was to re-run train.py, which failed the same way: --init_from=resume reads last.pt
    first. The fix now names ckpt.pt beside it, and followed, the run resumes from it."""
    out_dir = copy_run(finished, tmp_path)
    last = os.path.join(out_dir, "last.pt")
    with open(last, "r+b") as f:
        f.truncate(100)
    before = snapshot(out_dir)
    cfg = dict(finished, out_dir=out_dir, init_from="resume", max_iters=20)
    args = [f"--{k}={v}" for k, v in cfg.items()]
    one_error_line(train.main, args, f"cannot read checkpoint '{last}'", "move it away",
                   f"resumes from {os.path.join(out_dir, 'ckpt.pt')}")
    assert snapshot(out_dir) == before
    os.rename(last, os.path.join(tmp_path, "damaged.pt"))
    assert train.main(args)["iter_num"] == 20


def test_a_run_from_its_own_out_dirs_checkpoint_is_refused_before_writing_over_it(finished, tmp_path):
    """--init_from=<out_dir>/ckpt.pt into that out_dir wrote over the checkpoint it started from at its first save.
    The fixes that name --init_from=<a checkpoint> led there: they now name another --out_dir, and work."""
    out_dir = copy_run(finished, tmp_path)
    before = snapshot(out_dir)
    ckpt = os.path.join(out_dir, "ckpt.pt")
    cfg = dict(finished, out_dir=out_dir, init_from=ckpt, max_iters=4)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], f"--init_from={ckpt} is in --out_dir",
                   "write over the checkpoint it starts from", "--out_dir=NEW_DIR")
    link = tmp_path / "start.pt"   # a link to it: the save would replace the file it points to
    link.symlink_to(ckpt)
    cfg["init_from"] = str(link)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], f"{link} (a link to {ckpt}) is in",
                   "write over the checkpoint it starts from")
    # a run's folder, taken now as sample.py's --out_dir takes it (refused before; a hunt): its ckpt.pt
    cfg["init_from"] = out_dir
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], f"--init_from={ckpt} is in --out_dir")
    assert snapshot(out_dir) == before
    started = train.main([f"--{k}={v}" for k, v in dict(cfg, out_dir=str(tmp_path / "from_folder")).items()])
    assert started["iter_num"] == 4
    # a resume that changes the model names a new run from its weights, in another out_dir
    cfg = dict(finished, out_dir=out_dir, init_from="resume", max_iters=20, n_layer=3)
    message = one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "n_layer=3 differs")
    fix = message.split("(fix: ")[1].rstrip(")").split("weights: ")[1].split()
    assert fix[:2] == [f"--init_from={os.path.join(out_dir, 'last.pt')}", "--out_dir=NEW_DIR"], fix
    new = str(tmp_path / "new")
    args = [f"--{k}={v}" for k, v in cfg.items() if k not in ("out_dir", "init_from")]
    assert train.main(args + [a.replace("NEW_DIR", new) for a in fix])["iter_num"] == 20
    assert snapshot(out_dir) == before


def test_a_data_dir_given_is_never_prepared_over_its_token_files(finished, tmp_path, monkeypatch):
    """A --data_dir whose meta.json was gone got tinyshakespeare (the default dataset) written over its train.bin and
    val.bin, and the run trained on it without an error (a fuzz of the commands). A new or empty --data_dir is
    still prepared (tools.gpu_check's quickstart trains into one)."""
    data = tmp_path / "mine"
    shutil.copytree(finished["data_dir"], data)
    os.remove(data / "meta.json")
    before = snapshot(str(data))
    cfg = dict(finished, data_dir=str(data), out_dir=str(tmp_path / "out"))
    cfg.pop("dataset")
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], f"--data_dir {data} holds token files",
                   "write over them", f"python prepare.py --input=TEXT_FILE --out_dir={data}")
    assert snapshot(str(data)) == before and not (tmp_path / "out").exists()
    new = tmp_path / "new"
    prepared = []

    def prepare(dataset, out_dir):
        prepared.append((dataset, out_dir))
        write_token_dataset(out_dir)

    train.prepared_data(dict(cfg, data_dir=str(new), dataset="shakespeare_char"), prepare, rank=0, world=1)
    assert prepared == [("shakespeare_char", str(new))]
    # an interrupted prepare's own files (its marker) are prepared again; another program's token files in the
    # default data/<dataset> are refused as a --data_dir's are (prepare.py's own refusal named --force, which
    # train.py has not)
    from safety_net.dataset import PREPARING
    (data / PREPARING).write_text("")
    train.prepared_data(dict(cfg, data_dir=str(data), dataset="shakespeare_char"), prepare, rank=0, world=1)
    assert prepared[-1] == ("shakespeare_char", str(data))
    monkeypatch.chdir(tmp_path)
    theirs = tmp_path / "data" / "owt"
    theirs.mkdir(parents=True)
    for name in ("train.bin", "val.bin"):
        shutil.copy(data / name, theirs / name)
    mine = tmp_path / "data" / "mine"   # a folder's own test.bin: its meta.json fix did not apply (a review)
    mine.mkdir()
    (mine / "test.bin").write_text("precious")
    with pytest.raises(UserError, match="^data/mine holds test.bin but no meta.json.*move them away"):
        train.prepared_data(dict(cfg, data_dir="", dataset="mine"), prepare, rank=0, world=1)
    own = tmp_path / "own"   # a dataset of ours that lost its val.bin: prepared again, not told to move away
    shutil.copytree(finished["data_dir"], own)
    os.remove(own / "val.bin")
    train.prepared_data(dict(cfg, data_dir=str(own), dataset="shakespeare_char"), prepare, rank=0, world=1)
    assert prepared[-1] == ("shakespeare_char", str(own))
    with pytest.raises(UserError, match="^data/owt holds token files but no meta.json.*echo '") as refused:
        train.prepared_data(dict(cfg, data_dir="", dataset="owt"), prepare, rank=0, world=1)
    # its other fix runs: it lacked --force, without which prepare.py refuses these files (a hunt)
    text = tmp_path / "notes.txt"
    text.write_text("To be, or not to be: that is the question.\n" * 20)
    fix = str(refused.value).split("prepare its text again: python prepare.py ")[1].removesuffix(")")
    train.prepare.main(fix.replace("TEXT_FILE", str(text)).split())
    assert json.loads((theirs / "meta.json").read_text())["tokenizer"] == "char"


@pytest.mark.parametrize("key", ["iter_num", "best_val_loss"])
def test_resume_without_its_iteration_is_one_line(finished, tmp_path, key):
    """A checkpoint without its iteration or its best val loss (a hunt: with the latter not checked, a KeyError
    traceback, and no test failed)."""
    out_dir = copy_run(finished, tmp_path, edit=lambda c: c.pop(key))
    before = snapshot(out_dir)
    cfg = dict(finished, out_dir=out_dir, init_from="resume", max_iters=20)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], f"no {key}", "cannot be resumed")
    assert snapshot(out_dir) == before


def test_resume_below_the_checkpoints_iteration_is_one_line(finished, tmp_path):
    """max_iters under the iteration resumed from trained nothing, printed a warmup note about iterations that
    had run, and rewrote last.pt with the lower max_iters (a user's walkthrough)."""
    out_dir = copy_run(finished, tmp_path)
    before = snapshot(out_dir)
    cfg = dict(finished, out_dir=out_dir, init_from="resume", max_iters=9)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "max_iters=9 is below iteration 10",
                   "--eval_only=True")
    assert snapshot(out_dir) == before
    cfg["max_iters"] = 10   # at its iteration: it evaluates, as a finished run's resume does
    assert train.train({**train.DEFAULTS, **cfg}, explicit=set(cfg))["iter_num"] == 10


def test_a_resumed_run_says_the_iterations_it_ran(finished, tmp_path, capsys):
    """The closing line counts this run's iterations (it said 15 after running 5 from 10)."""
    out_dir = copy_run(finished, tmp_path)
    cfg = dict(finished, out_dir=out_dir, init_from="resume", max_iters=15)
    train.train({**train.DEFAULTS, **cfg}, explicit=set(cfg))
    done = [line for line in capsys.readouterr().out.splitlines() if line.startswith("done: ")]
    assert len(done) == 1 and ", 5 iterations in " in done[0] and done[0].endswith("(iterations 10 to 15)"), done


def test_init_from_a_file_torch_did_not_write_is_one_line(finished, tmp_path):
    """A text file given as --init_from: torch's unpickler said 'Unsupported operand 35', and the fix was to
    re-run train.py to rewrite it."""
    text = tmp_path / "notes.txt"
    text.write_text("# a config, not a checkpoint\n")
    cfg = dict(finished, out_dir=str(tmp_path / "out"), init_from=str(text))
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "it is not a file torch.save writes",
                   "point at a ckpt.pt or last.pt")
    assert not (tmp_path / "out").exists()


def test_resume_from_data_prepared_again_says_so(finished, tmp_path):
    """The same dataset name, prepared again from another text: the message said 'its dataset: <that name>'."""
    out_dir = copy_run(finished, tmp_path)
    other = write_token_dataset(tmp_path / "other", vocab_size=20)
    dataset = torch.load(os.path.join(out_dir, "last.pt"), weights_only=True)["dataset"]
    cfg = dict(finished, out_dir=out_dir, init_from="resume", max_iters=20, data_dir=other, dataset=dataset)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "the same dataset, prepared again since")


def test_shakespeare_input_naming_a_missing_file_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAKESPEARE_INPUT", str(tmp_path / "nope.txt"))
    one_error_line(entry_point("prepare"), ["shakespeare_char", f"--out_dir={tmp_path / 'd'}"],
                   f"SHAKESPEARE_INPUT={tmp_path / 'nope.txt'}: no such file", "or unset it")
    assert not (tmp_path / "d").exists()


def test_resume_on_a_bigger_vocabulary_names_the_tokenizer(finished, tmp_path):
    out_dir = copy_run(finished, tmp_path)
    other = write_token_dataset(tmp_path / "other", vocab_size=20)
    cfg = dict(finished, out_dir=out_dir, init_from="resume", max_iters=20, data_dir=other)
    one_error_line(train.main, [f"--{k}={v}" for k, v in cfg.items()], "another tokenizer")


@pytest.fixture
def ctrl_c_handler():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_second_ctrl_c_during_the_save_says_what_is_kept(tiny_train_config, monkeypatch, ctrl_c_handler, capsys):
    real_save = train.save_checkpoint

    def save(path, model, model_args, **fields):   # the first Ctrl-C arrives in iteration 13; the second
        if fields["iter_num"] == 14:                # during the save it asks for
            os.kill(os.getpid(), signal.SIGINT)
        return real_save(path, model, model_args, **fields)

    def callback(event, info):
        if event == "iter" and info["iter_num"] == 14:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(train, "save_checkpoint", save)
    try:
        summary = train.train({**train.DEFAULTS, **tiny_train_config}, explicit=set(tiny_train_config),
                              callback=callback)
    except KeyboardInterrupt:   # not a test failure by itself: pytest would stop the whole session
        pytest.fail("the second Ctrl-C escaped train() without a word on what is kept")
    assert summary["interrupted"] and "last.pt keeps iteration 10" in capsys.readouterr().out
    assert checkpoint.load_checkpoint(tiny_train_config["out_dir"], prefer=("last.pt",))["iter_num"] == 10


def test_compare_dir_that_is_a_file(tmp_path, monkeypatch):
    from tools import compare
    monkeypatch.chdir(tmp_path)
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    one_error_line(compare.main, ["--variants=gpt", "--max_iters=2", f"--compare_dir={taken}"], str(taken))
    assert taken.read_text() == "not a folder" and sorted(os.listdir(tmp_path)) == ["taken"]


def test_bench_of_a_config_file_whose_dataset_is_not_prepared_is_one_line(tmp_path, monkeypatch, capsys):
    """tools.bench config/gpt_shakespeare.py from a folder without data/shakespeare_char measured GPTConfig's 50304-token
    vocabulary (30M parameters where train.py builds 10.8M) in silence (a hunt): one line naming the dataset and its
    command now; with vocab_size set in the file, it measures."""
    from conftest import one_error_line
    from tools import bench
    monkeypatch.chdir(tmp_path)
    path = os.path.join(ROOT, "config", "gpt_shakespeare.py")
    one_error_line(bench.main, [path, "--dry_run=True"], "data/shakespeare_char is not prepared",
                   "python prepare.py shakespeare_char")
    own = tmp_path / "own.py"
    own.write_text(open(path).read() + "\nvocab_size = 65\n")
    bench.main([str(own), "--dry_run=True"])
    assert "10.77M" in capsys.readouterr().out


def test_bench_refuses_a_model_the_compiled_decoder_cannot_run_before_measuring(capsys):
    """--mode=decode --compile=True --variants=gpt,deep_thinking measured gpt, then refused Deep Thinking with
    sample.py's fix, and the gpt row was lost (a hunt): one line first, with a fix for this command."""
    from conftest import one_error_line
    from tools import bench
    one_error_line(bench.main, ["--mode=decode", "--compile=True", "--variants=gpt,deep_thinking", "--n_layer=2",
                                "--n_embd=32", "--n_head=2", "--n_kv_head=None", "--block_size=32", "--gen_tokens=5",
                                "--repeats=1", "--warmup=0", "--device=cpu", "--num_threads=1"],
                   "deep_thinking: --compile measures tools.fast_sample's compiled decode step",
                   "drop --compile, or drop deep_thinking")
    assert "decode" not in capsys.readouterr().out


def test_bench_refuses_nonpositive_counts(tmp_path, monkeypatch, capsys):
    from tools import bench
    monkeypatch.chdir(tmp_path)
    message = one_error_line(bench.main, ["--variants=gpt", "--measure=sample", "--gen_tokens=-5", "--device=cpu",
                                          "--n_layer=1", "--n_embd=16", "--n_head=2", "--block_size=16",
                                          "--vocab_size=32"])
    assert message.startswith("error: --gen_tokens") and capsys.readouterr().out == ""


# --- the fault trial (tests/fault_trial.py): minutes for all its cases, so the suite runs three --------------

@pytest.mark.slow   # a check of the check (20 s): `python -m tests.fault_trial` runs every case
def test_the_fault_trial_runs_and_judges_its_cases(tmp_path):
    """python -m tests.fault_trial on three representative cases (a thread count that crashed torch, a planted
    checkpoint, a second writer): each ok, with the summary line and exit code 0. Then its judge on commands that
    misbehave: each is a FAIL saying why. (The whole trial: python -m tests.fault_trial, minutes.)"""
    import fault_trial
    cases = ("train_num_threads_huge", "sample_ckpt_planted", "train_second_writer")
    r = subprocess.run([sys.executable, "-m", "tests.fault_trial", f"--cases={','.join(cases)}"], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(line.split()[1] for line in r.stdout.splitlines() if line.startswith("ok ")) == sorted(cases), r.stdout
    assert "3 cases: 3 ok, 0 fail" in r.stdout

    bad = {"exits_0": ("print('fine')", "exit code 0"),
           "traceback": ("import json; json.loads('{')", "traceback, exit code 1"),
           "writes": ("open('left_behind', 'w').close(); raise SystemExit('error: no (fix: none)')",
                      "changed on disk: +cases/writes/left_behind"),
           "runs_code": (f"open({fault_trial.MARKER!r}, 'w').close(); raise SystemExit('error: x (fix: y)')",
                         "code from a planted file ran")}
    root, fx = str(tmp_path / "root"), str(tmp_path / "fx")
    os.makedirs(fx)
    for name, (code, why) in bad.items():
        case = fault_trial.Case(name, "self-check", ["{c}/cmd.py"], setup=fault_trial.files(**{"cmd.py": code}))
        got, _ = fault_trial.run_case(case, root, fx, ROOT, dict(os.environ), 60, ())
        assert got.startswith(why), (name, got)


def test_bench_out_through_a_symbolic_link_is_written_atomically(tmp_path):
    """--out names a symbolic link: the link is replaced by the file, as every writer here does (atomic_open);
    the link's target is left as it was (it used to be overwritten in place)."""
    from tools.benchmarks.report import write_out
    for name in ("bench.md", "bench.csv"):
        target, link = tmp_path / f"target-{name}", tmp_path / name
        target.write_text("someone else's file\n")
        link.symlink_to(target)
        write_out(str(link), "| table |", [{"variant": "gpt", "ms": 1.0}], [])
        assert target.read_text() == "someone else's file\n"
        assert not link.is_symlink()
        assert ("variant,ms" if name.endswith(".csv") else "| table |") in link.read_text()
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_fix_names_a_file_not_there_yet(tmp_path):
    """unused_name (the fixes of inherit's --out_dir and convert import's --out): stem, then stem-2, stem-3, ...; a
    file, a folder or a broken link counts as taken, so following the fix writes over nothing."""
    from safety_net.fileio import unused_name
    stem = str(tmp_path / "run")
    assert unused_name(stem, ".md") == stem + ".md"
    (tmp_path / "run.md").write_text("x")
    (tmp_path / "run-2.md").mkdir()
    os.symlink(tmp_path / "missing", tmp_path / "run-3.md")
    assert unused_name(stem, ".md") == stem + "-4.md"
    # with a file written beside it (an export's tokenizer), both names free: run-4.md's was taken (a review: the
    # executorch export's fix named a .pte whose tokenizer name another file held)
    (tmp_path / "run-4.json").write_text("x")
    assert unused_name(stem, ".md", beside=".json") == stem + "-5.md"


def test_a_dataset_or_an_export_is_refused_in_a_training_runs_folder(tmp_path, monkeypatch):
    """prepare.py, tools.pangu.compact_vocab and the Hugging Face export wrote their files beside a run's
    checkpoints (exit 0), and train.py its checkpoints into its own dataset's folder (a hunt): every tool then
    read a folder of two kinds."""
    import prepare
    from tools.huggingface import convert
    from tools.pangu import compact_vocab
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "last.pt").write_bytes(b"a run's checkpoint")
    text = tmp_path / "notes.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 50)
    before = sorted(os.listdir(run_dir))
    one_error_line(prepare.main, [f"--input={text}", f"--out_dir={run_dir}"], "a training run's folder",
                   "--out_dir=data/notes_char")
    one_error_line(compact_vocab.main, [f"--input={text}", "--vocab_size=300", f"--out_dir={run_dir}"],
                   "a training run's folder")
    one_error_line(convert.main, ["export", f"--out_dir={run_dir / 'last.pt'}", f"--out={run_dir}"],
                   "a training run's folder", "--out=hf-out")
    assert sorted(os.listdir(run_dir)) == before
    monkeypatch.chdir(tmp_path)
    tiny = ["--device=cpu", "--max_iters=1", "--eval_iters=1", "--n_layer=1", "--n_embd=16", "--n_head=2",
            "--block_size=8", "--batch_size=2"]   # what the run would be, were it not refused: seconds
    one_error_line(train.main, ["--data_dir=data_here", "--out_dir=data_here"] + tiny,
                   "out_dir data_here is a dataset's folder", "--out_dir=out-data_here")
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "run"]
    # another prepared dataset's folder: its token files and the checkpoints mixed, and preparing it again was
    # then refused as a run's folder (a hunt)
    prepare.main([f"--input={text}", "--out_dir=other"])
    before = sorted(os.listdir("other"))
    one_error_line(train.main, ["--data_dir=data_here", "--out_dir=other"] + tiny,
                   "out_dir other is a dataset's folder", "--out_dir=out-other")
    assert sorted(os.listdir("other")) == before and not os.path.exists("data_here")


def test_bench_tokenize_refuses_a_text_it_cannot_measure(tmp_path):
    """An empty file ended in a ZeroDivisionError; a text without a line break within --mb, or not UTF-8, was
    measured as 0 MB at 0.00 MB/s without a word (a hunt). One line each, before any tokenizing."""
    from conftest import one_error_line
    from tools import bench_tokenize
    empty, one_line, latin1 = tmp_path / "empty.txt", tmp_path / "line.txt", tmp_path / "latin1.txt"
    empty.write_bytes(b"")
    one_line.write_bytes(b"word " * 1000)
    latin1.write_bytes("caf\xe9 au lait\n".encode("latin-1") * 10)
    one_error_line(bench_tokenize.main, [f"--input_path={empty}", "--num_proc=1"], "is empty")
    one_error_line(bench_tokenize.main, [f"--input_path={one_line}", "--num_proc=1"], "holds no whole line",
                   "a larger --mb")
    one_error_line(bench_tokenize.main, [f"--input_path={latin1}", "--num_proc=1"], "is not UTF-8 text", "at byte 3")

