"""Tests for tools/bench.py's command line: what it accepts and refuses, the header it prints, and --out. Parse-only,
--dry_run or a tiny model's one training step: no real measurement. (More of bench's tests: test_faults.py,
test_train_faults.py, test_plan.py.)"""
import re
import sys

import pytest
import torch

from conftest import one_error_line
from safety_net.configurator import UserError
from tools import bench

TINY = ["--device=cpu", "--n_layer=1", "--n_embd=16", "--n_head=2", "--block_size=16"]
TINY_TRAIN = TINY + ["--measure=train", "--seq_lens=8", "--warmup=0", "--repeats=1"]
TINY_FILE = "n_layer = 1\nn_embd = 16\nn_head = 2\nblock_size = 16\nvocab_size = 65\n"


def test_a_config_file_named_like_a_preset_is_read(tmp_path, monkeypatch):
    """A config file of one's own named `gpt` (no .py) is read, not refused as the preset's name (a hunt: a changed
    line did this, and no test failed)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt").write_text(TINY_FILE)
    entries = bench.parse(["gpt", "--measure=train", "--dry_run"])[1]
    assert [(e["name"], e["args"]["n_embd"]) for e in entries] == [("gpt", 16)]


def test_the_defaults():
    """Without models or a mode bench measures gpt, with train, memory, infer and sample; --mode=decode times 7
    repeats (a hunt: a changed line did this, and no test failed)."""
    cfg, entries = bench.parse(["--dry_run"])
    assert [e["name"] for e in entries] == ["gpt"] and cfg["measure"] == ["train", "memory", "infer", "sample"]
    assert bench.parse(["--mode=decode", "--dry_run"])[0]["repeats"] == 7


def test_no_measure_chosen_is_refused():
    """--measure= (nothing) is refused in one line that says so (a hunt found it: the line said "unknown measure
    []"; and a changed line that let it print the header and exit 0 failed no test)."""
    one_error_line(bench.main, ["--measure=", "--dry_run"] + TINY, "--measure chose no measure",
                   "train,memory,infer,sample,decode")


@pytest.mark.parametrize("argv, words", [
    (["--seq_lens=0"], "--seq_lens needs lengths >= 1"),
    (["--infer_batch=0"], "--infer_batch >= 1 required"),
    (["--gen_tokens=0", "--measure=sample"], "--gen_tokens=0 must be >= 1"),
    (["--sample_repeats=0", "--measure=sample"], "--sample_repeats=0 must be >= 1"),
    (["--decode_steps=0", "--measure=infer"], "--decode_steps=0 must be >= 1"),
])
def test_a_count_of_zero_is_refused(argv, words):
    """Lengths and counts of 0 are refused (a hunt: a changed line did this, and no test failed)."""
    with pytest.raises(UserError, match=re.escape(words)):
        bench.parse(argv + ["--dry_run"])


def test_a_config_files_batch_size_is_used(tmp_path):
    """A config file's batch_size is its model's training batch unless --batch_size is given (a hunt: a changed
    line did this, and no test failed)."""
    path = tmp_path / "tiny.py"
    path.write_text(TINY_FILE + "batch_size = 3\n")
    entries = bench.parse([str(path), "--measure=train", "--dry_run"])[1]
    assert [(e["name"], e["batch_size"]) for e in entries] == [("tiny", 3)]
    entries = bench.parse([str(path), "--measure=train", "--batch_size=5", "--dry_run"])[1]
    assert [(e["name"], e["batch_size"]) for e in entries] == [("tiny", 5)]


def test_compile_without_decode_takes_any_model():
    """--compile compiles the training step of any model; only --measure=decode's compiled decoder refuses some,
    with one fix (a hunt: a changed line did this, and no test failed)."""
    argv = ["--variants=deep_thinking", "--compile=True", "--n_layer=2", "--dry_run"]
    bench.parse(argv + ["--measure=train"])
    with pytest.raises(UserError) as e:
        bench.parse(argv + ["--mode=decode"])
    assert str(e.value).count("(fix: ") == 1, str(e.value)


@pytest.mark.parametrize("argv, line", [
    (["--depth_scale=0.5"], "scaled: width x1, depth x0.5 "),
    (["--scale=0.5"], "scaled: width x0.5, depth x0.5 "),
])
def test_the_header_says_how_the_models_were_scaled(argv, line, capsys):
    """--scale and --depth_scale are named in the header (a hunt: a changed line did this, and no test failed)."""
    bench.main(argv + ["--dry_run", "--device=cpu", "--measure=train"])
    assert line in capsys.readouterr().out


def test_an_out_file_of_another_kind_is_refused(tmp_path):
    """--out=b.txt is refused: bench writes a .csv or a .md (a hunt: a changed line did this, and no test
    failed)."""
    one_error_line(bench.main, [f"--out={tmp_path / 'b.txt'}", "--dry_run", "--device=cpu", "--measure=train"],
                   "bench writes a .csv (one row per measurement) or a .md", "--out=")


def test_num_threads_is_set(capsys, one_thread):
    """--num_threads sets torch's thread count, as the header shows (a hunt: a changed line did this, and no test
    failed)."""
    bench.main(["--num_threads=2", "--dry_run", "--device=cpu", "--measure=train"])
    assert ", 2 threads, " in capsys.readouterr().out and torch.get_num_threads() == 2


def test_compile_on_a_cpu_without_a_cpp_compiler_is_one_line(monkeypatch):
    """--compile=True on a CPU without a C++ compiler is one line before anything is measured (a hunt: a changed
    line did this, and no test failed)."""
    import torch._inductor.cpp_builder as cpp_builder

    def no_compiler():
        raise cpp_builder.exc.InvalidCxxCompiler()

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    one_error_line(bench.main, ["--compile=True", "--dry_run", "--device=cpu", "--measure=train"],
                   "torch.compile on the CPU needs a C++ compiler", "--compile=False")


class Stop(Exception):
    pass


def test_the_header_is_flushed_before_measuring(monkeypatch):
    """The header reaches a pipe or a file before the measurements' progress on stderr, not after it (a hunt: a
    changed line did this, and no test failed)."""
    events = []

    class Stdout:
        def write(self, text):
            events.append(("write", text))

        def flush(self):
            events.append(("flush",))

    def run_entry(*args):
        events.append(("measure",))
        raise Stop

    monkeypatch.setattr(sys, "stdout", Stdout())
    monkeypatch.setattr(bench, "run_entry", run_entry)
    with pytest.raises(Stop):
        bench.main(TINY_TRAIN)
    assert events[0][1].startswith("bench: torch ") and ("flush",) in events[:events.index(("measure",))], events


def test_out_holds_the_header_and_is_replaced_by_the_next_run(tmp_path, one_thread):
    """A .md --out starts with the header (what bench knows its own files by): a second run replaces it (a hunt: a
    changed line did this, and no test failed)."""
    out = tmp_path / "b.md"
    for _ in range(2):
        bench.main([f"--out={out}"] + TINY_TRAIN)
        assert out.read_text().startswith("bench: torch ")


def test_a_dry_run_writes_no_out_file(tmp_path, capsys):
    """--dry_run with --out measures nothing and writes nothing (a hunt: a changed line did this, and no test
    failed)."""
    out = tmp_path / "b.md"
    bench.main([f"--out={out}", "--dry_run"] + TINY_TRAIN)
    assert not out.exists() and f"--dry_run: nothing measured, {out} not written" in capsys.readouterr().out
