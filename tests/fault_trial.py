"""
Fault trial (issue 23, point 5): bad input and damaged files given to every command the way a user would give
them, each case a real subprocess, and what each must do about it.

    python -m tests.fault_trial                          # every case, two at a time (a few minutes on 2 cores)
    python -m tests.fault_trial --cases=sample_*,hf_*    # the cases whose names match (fnmatch patterns)
    python -m tests.fault_trial --list                   # the cases and their classes, without running them

Classes: unknown keys and wrong types; out-of-range numbers (negative, zero, huge, inf, NaN from a config file)
for counts, sizes, seeds, thread counts, rates and temperatures; bad paths (missing, a file for a folder, a
read-only folder, names that leave their folder); damaged files (checkpoints, meta.json, token files, log.csv,
status.json, config files); Hugging Face folders with a damaged or unusual config.json, index or weights;
checkpoints of another tokenizer, with NaN or integer weights, or unknown model_args; checkpoints whose pickle
would run code; a second writer into an out_dir or compare_dir. Issue 40's: your own text (binary, UTF-16, too
short, a name over a dataset of another text), vocabularies that do not fit their model (nanoGPT's meta.pkl, an
ExecuTorch program's tokenizer, a GGUF's keys), damaged programs (one makes ExecuTorch's runtime abort), prompts
llama.cpp would drop characters of, W&B without a key or a server, sizes that cannot be built, odd output paths.

Every case must end with exit code 1, its last line on stderr the one `error: ... (fix: ...)` line (lines
before it are the commands' own notes, e.g. sample.py naming the newest checkpoint), no Python traceback
anywhere, and nothing changed on disk: the sizes and sha256 of every file (and the folders) under the case's
own folder and under the shared fixtures are compared before and after (only the pid inside an existing writer
lock, .lock, may change). A planted checkpoint (its pickle would create a marker file when loaded) must never
create it. A read-only folder stops root too: as root the command runs in a user namespace (`unshare -U`).
Issue 48's cases expect otherwise: an interrupted case gets SIGINT (Ctrl-C) or SIGTERM once its output shows it
is mid-way (a runner's streamed text, or an export paused inside its write by PAUSED_WRITE) and must end with
exit code 130, its last line on stderr `interrupted`, no traceback and nothing changed on disk; a case that must
work (a text with a byte-order mark) ends with exit code 0, and its own check reads what it wrote (only the
fixtures must stay as they were). A case that needs a module missing here (llama_cpp) is skipped with a note.

Nothing here touches the repository's data/ or out*/: the code is copied to a scratch folder, every command
runs with its own empty temporary folder as the current directory, and the fixtures (tinyshakespeare prepared
char-level, a tiny trained run, its Hugging Face, ExecuTorch and GGUF exports, a finished compare.py folder, a
dataset of another tokenizer) are built once per trial under the same temporary root. Prints one line per case (`ok` /
`FAIL <why>`), then `N cases: K ok, M fail`; exit code 1 when any case fails. Not part of the pytest suite
(minutes); tests/test_faults.py runs a few cases through it.
"""

import concurrent.futures
import fnmatch
import hashlib
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from safety_net.configurator import UserError, run_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS = dict(
    cases="",        # comma list of case names or fnmatch patterns; "" = all
    workers=2,       # cases run at the same time (each is one python process)
    timeout=120.0,   # seconds a case may take; a case that runs longer fails
    list=False,      # print the cases and exit
    keep=False,      # keep the temporary folder (fixtures and every case's folder) and print where it is
)
# what the repository copy needs: the code and the config files, not data, results or checkpoints
COPY_IGNORE = shutil.ignore_patterns(".git", "data", "out*", "hf-out*", "results", "docs", "tests", "__pycache__",
                                     "*.pyc", ".pytest_cache", ".benchmarks", ".venv")
MARKER = "RAN_CODE_FROM_A_FILE"
# the tiny model every training case starts from (train.py's settings, as the fixture run was trained)
TINY = ["--dataset=shakespeare_char", "--n_layer=1", "--n_embd=16", "--n_head=2", "--block_size=16",
        "--batch_size=4", "--max_iters=4", "--eval_interval=2", "--eval_iters=1", "--device=cpu"]


# --- cases ---------------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    kind: str                 # the class of fault, for the report
    argv: list                # after `python`: a script (train.py) or -m tools.x, then its arguments. {c} is the
                              # case's folder, {fx} the fixtures'
    setup: object = None      # setup(c, fx): writes the case's files before it runs (nothing in fx)
    needs: tuple = ()         # fixtures the case reads (built before it runs)
    holder: str = ""          # a folder (under {c}) whose writer lock another process holds while the case runs
    read_only: str = ""       # a folder (under {c}) made read-only before the case runs
    env: dict = None          # environment variables for the command ({c} expanded), over the trial's
    expect: str = "error"     # error (exit 1, one error line) | interrupted (exit 130 after `signal`) | ok (exit 0)
    signal: str = ""          # SIGINT or SIGTERM, sent once signal_when(stdout, stderr) is true
    signal_when: object = None
    check: object = None      # check(c, stdout) -> "" or what is wrong: what an ok or interrupted case left
    requires: str = ""        # a module the command needs (llama_cpp): the case is skipped where it is missing


# A command whose atomic writes pause inside the write, their temporary file written and not yet renamed over the
# target, until a signal comes: python -c PAUSED_WRITE tools.llamacpp.export ARGS. It says PAUSED on stderr then.
PAUSED = "paused mid-write:"
PAUSED_WRITE = f"""
import contextlib, importlib, signal, sys, time
from safety_net import fileio
signal.signal(signal.SIGINT, signal.default_int_handler)   # Ctrl-C as in a terminal (a background start ignores it)
write = fileio.atomic_path


@contextlib.contextmanager
def paused(path):
    with write(path) as tmp:
        yield tmp
        print("{PAUSED}", tmp, file=sys.stderr, flush=True)
        # short sleeps: Python runs the handler of a signal that came just before a sleep started only when that
        # sleep ends (one sleep of 300 s outlived a test's 120 s watchdog on a loaded CI machine)
        for _ in range(3000):
            time.sleep(0.1)


fileio.atomic_path = paused
importlib.import_module(sys.argv[1]).main(sys.argv[2:])
"""
# python -c AS_IN_A_TERMINAL tools.executorch.run ARGS: the command as `python -m` runs it, with Ctrl-C's handler even
# where the trial was started in the background (which starts it, and every child, with SIGINT ignored)
AS_IN_A_TERMINAL = """
import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""
# put before PAUSED_WRITE: tools.executorch.export's lowering (30-100 s here) replaced by fixed bytes, for cases that
# test the write (the lowering itself stops on Ctrl-C like any code: exit 130, nothing written yet)
# The stub's bytes: what tools.executorch.export.written_here tells a program of ours by (an ExecuTorch header, then
# our method names), so that an export may replace it
STUB_PTE = b"<\0\0\0ET12eh00" + struct.pack("<IQQQ", 24, 64, 0, 0) + b"max_len\0eot_token\0".ljust(24, b"\0")
STUB_PROGRAM = f"""
import tools.executorch.export


def stub_program(*args, **kwargs):
    return {STUB_PTE!r}


tools.executorch.export.program_bytes = stub_program
"""


def train(*extra):
    return ["train.py", *TINY, "--data_dir={fx}/data", "--out_dir={c}/out", *extra]


def sample(*extra):
    return ["sample.py", "--out_dir={fx}/run", "--device=cpu", "--num_samples=1", "--max_new_tokens=5", *extra]


def tool(name, *extra):
    return ["-m", f"tools.{name}", *extra]


def compare(*extra):
    return tool("compare", "--variants=gpt", "--compare_dir={c}/cmp", "--data_dir={fx}/data", *TINY,
                "--bench_iters=0", "--sample_tokens=0", *extra)


def compact(*extra, out_dir="{c}/d"):
    return tool("pangu.compact_vocab", *extra, f"--out_dir={out_dir}")


def wikitext(*extra, out_dir="{c}/d"):
    return tool("wikitext103", *extra, f"--out_dir={out_dir}")


def inherit(*extra):
    return tool("pangu.inherit", "--init_from={fx}/run", "--out_dir={c}/small", "--n_layer=1", "--n_embd=8",
                "--n_head=1", "--calib_batches=1", *extra)


def refine(*extra):
    return tool("pangu.refine", "--out_dir={c}/run", *extra)


def export(*extra):
    return tool("huggingface.convert", "export", "--out_dir={fx}/run", "--out={c}/hf", *extra)


def hf_import(*extra):
    return tool("huggingface.convert", "import", "{c}/hf", "--out={c}/hf.pt", *extra)


# the fixtures a case reads, each with those it needs first (FIXTURES builds them)
DATA = ("data",)
RUN = ("data", "run")
HF = ("data", "run", "hf")
CMP = ("data", "cmp")
DATA2 = ("data2",)


def all_cases():
    """Every case, in the order they are reported: CASE_GROUPS, functions that each yield the cases of one command
    or issue."""
    cases = []
    for group in CASE_GROUPS:
        cases.extend(group())
    return cases


def case(name, kind, argv, setup=None, needs=(), **kw):
    """A Case; needs: the fixtures it reads (DATA, RUN, ...: each with the fixtures it needs first)."""
    return Case(name, kind, argv, setup, tuple(needs), **kw)


def train_cases():
    """train.py: keys and values, paths and files, checkpoints, nanoGPT's files."""
    yield case("train_unknown_key", "keys/types", train("--n_layers=2"), needs=DATA)
    yield case("train_wrong_type", "keys/types", train("--batch_size=four"), needs=DATA)
    yield case("train_config_key_unknown", "keys/types", ["train.py", "{c}/cfg.py", *train()[1:]],
               setup=files(**{"cfg.py": "n_layers = 2\n"}), needs=DATA)
    yield case("train_batch_size_zero", "numbers", train("--batch_size=0"), needs=DATA)
    yield case("train_batch_size_huge", "numbers", train("--batch_size=1000000000000"), needs=DATA)
    yield case("train_block_size_huge", "numbers", train("--block_size=1000000000000"), needs=DATA)
    yield case("train_vocab_size_huge", "numbers", train("--vocab_size=1000000000000"), needs=DATA)
    yield case("train_lr_inf", "numbers", train("--learning_rate=1e999"), needs=DATA)
    yield case("train_lr_nan", "numbers", ["train.py", "{c}/cfg.py", *train()[1:]],
               setup=files(**{"cfg.py": "learning_rate = float('nan')\n"}), needs=DATA)
    yield case("train_dropout_nan", "numbers", ["train.py", "{c}/cfg.py", *train()[1:]],
               setup=files(**{"cfg.py": "dropout = float('nan')\n"}), needs=DATA)
    yield case("train_init_std_inf", "numbers", train("--init_std=1e999"), needs=DATA)
    yield case("train_seed_huge", "numbers", train("--seed=18446744073709551616"), needs=DATA)
    yield case("train_num_threads_huge", "numbers", train("--num_threads=100000"), needs=DATA)
    yield case("train_device_unknown", "keys/types", train("--device=gpu"), needs=DATA)
    # train.py: paths and files
    yield case("train_config_missing", "paths", ["train.py", "{c}/nope.py", *train()[1:]], needs=DATA)
    yield case("train_config_syntax", "damaged files", ["train.py", "{c}/cfg.py", *train()[1:]],
               setup=files(**{"cfg.py": "n_layer = = 2\n"}), needs=DATA)
    yield case("train_config_raises", "damaged files", ["train.py", "{c}/cfg.py", *train()[1:]],
               setup=files(**{"cfg.py": "n_layer = 1 // 0\n"}), needs=DATA)
    yield case("train_dataset_unknown", "paths", train("--dataset=nope", "--data_dir={c}/nodata"), needs=DATA)
    yield case("train_dataset_escapes", "paths", train("--dataset=../../escaped", "--data_dir="), needs=DATA)
    yield case("train_out_dir_is_file", "paths", train("--out_dir={c}/taken"), setup=files(taken="a file"), needs=DATA)
    yield case("train_out_dir_read_only", "paths", train("--out_dir={c}/ro/out"), setup=folders("ro"), read_only="ro",
               needs=DATA)
    yield case("train_train_bin_odd_size", "damaged files", train("--data_dir={c}/data"),
               setup=copy_data(lambda d: truncate(f"{d}/train.bin", -1)), needs=DATA)
    yield case("train_train_bin_beyond_vocab", "damaged files", train("--data_dir={c}/data"),
               setup=copy_data(lambda d: poke(f"{d}/train.bin", 100, b"\xff\xff")), needs=DATA)
    yield case("train_val_bin_empty", "damaged files", train("--data_dir={c}/data"),
               setup=copy_data(lambda d: write(f"{d}/val.bin", b"")), needs=DATA)
    yield case("train_meta_json_garbage", "damaged files", train("--data_dir={c}/data"),
               setup=copy_data(lambda d: write(f"{d}/meta.json", b"\x00\x01garbage")), needs=DATA)
    yield case("train_meta_json_no_vocab", "damaged files", train("--data_dir={c}/data"),
               setup=copy_data(lambda d: write(f"{d}/meta.json", '{"tokenizer": "char"}')), needs=DATA)
    yield case("train_data_segments_garbage", "damaged files", train("--data_segments={c}/refine.npy"),
               setup=files(**{"refine.npy": b"\x93NUMPY garbage"}), needs=DATA)
    # train.py: checkpoints
    yield case("train_resume_nothing", "paths", train("--init_from=resume"), setup=folders("out"), needs=DATA)
    yield case("train_resume_truncated", "damaged files", train("--init_from=resume"),
               setup=copy_run("out", lambda o: truncate(f"{o}/last.pt", 0.5)), needs=RUN)
    yield case("train_resume_garbage", "damaged files", train("--init_from=resume"),
               setup=copy_run("out", lambda o: write(f"{o}/last.pt", garbage(20))), needs=RUN)
    yield case("train_resume_not_a_checkpoint", "damaged files", train("--init_from=resume"),
               setup=copy_run("out", lambda o: save(f"{o}/last.pt", [1, 2, 3])), needs=RUN)
    yield case("train_resume_log_csv_binary", "damaged files", train("--init_from=resume", "--max_iters=6"),
               setup=copy_run("out", lambda o: write(f"{o}/log.csv", b"iter,kind\n\xff\xfe\x00\x81")), needs=RUN)
    yield case("train_resume_below_its_iteration", "numbers", train("--init_from=resume", "--max_iters=2"),
               setup=copy_run("out"), needs=RUN)
    yield case("train_init_from_a_text_file", "damaged files", train("--init_from={c}/notes.txt"),
               setup=files(**{"notes.txt": "a text, not a checkpoint\n"}), needs=DATA)
    yield case("train_init_from_keyword_typo", "keys/types", train("--init_from=Resume"), needs=DATA)
    yield case("train_resume_other_model", "checkpoints", train("--init_from=resume", "--n_layer=2"),
               setup=copy_run("out"), needs=RUN)
    yield case("train_resume_nan_weights", "checkpoints", train("--init_from=resume", "--max_iters=6"),
               setup=copy_run("out", edit_ckpts(nan_weights)), needs=RUN)
    yield case("train_resume_planted", "planted code", train("--init_from=resume", "--max_iters=6"),
               setup=copy_run("out", plant_ckpts), needs=RUN)
    yield case("train_init_from_missing", "paths", train("--init_from={c}/nope.pt"), needs=DATA)
    yield case("train_init_from_hf_folder_damaged", "hf folders", train("--init_from={c}/hf"),
               setup=copy_hf(put={"config.json": "[1, 2]"}), needs=HF)   # the import runs in a subprocess: its one line
    yield case("train_init_from_gpt2_offline", "paths", train("--init_from=gpt2"))   # HF_HUB_OFFLINE=1: never the hub
    # nanoGPT's files: its checkpoints, meta.pkl and config keys
    yield case("train_init_from_nanogpt_damaged", "checkpoints", train("--init_from={c}/nano/ckpt.pt"),
               setup=nanogpt_files(drop="transformer.h.0.mlp.c_fc.weight"), needs=DATA)
    yield case("train_nanogpt_config_key_typo", "keys/types", ["train.py", "{c}/cfg.py", *train()[1:]],
               setup=files(**{"cfg.py": "wandb_log = False\nwandb_projekt = 'shakespeare-char'\n"}), needs=DATA)
    yield case("train_init_from_other_tokenizer", "checkpoints",
               train("--init_from={fx}/run/ckpt.pt", "--data_dir={fx}/data2"), needs=RUN + DATA2)
    yield case("train_init_from_nan_weights", "checkpoints", train("--init_from={c}/run/ckpt.pt"),
               setup=copy_run("run", edit_ckpts(nan_weights)), needs=RUN)
    yield case("train_init_from_unknown_model_args", "checkpoints", train("--init_from={c}/run/ckpt.pt"),
               setup=copy_run("run", edit_ckpts(unknown_model_args)), needs=RUN)
    yield case("train_init_from_planted", "planted code", train("--init_from={c}/run/ckpt.pt"),
               setup=copy_run("run", plant_ckpts), needs=RUN)
    yield case("train_second_writer", "second writer", train("--out_dir={c}/out"), setup=copy_run("out"), needs=RUN,
               holder="out")


def sample_cases():
    """sample.py (and tools.eval on nanoGPT's files): nanoGPT's checkpoints and data folders, then its own."""
    yield case("sample_nanogpt_meta_pkl_planted", "planted code",
               ["sample.py", "--out_dir={c}/nano", "--data_dir={c}/nanodata", "--device=cpu"],
               setup=nanogpt_files(plant=True))
    yield case("sample_nanogpt_meta_pkl_not_a_vocabulary", "damaged files",
               ["sample.py", "--out_dir={c}/nano", "--data_dir={c}/nanodata", "--device=cpu"],
               setup=nanogpt_files(meta={"vocab_size": 65, "itos": [1, 2]}))
    yield case("sample_nanogpt_untied_head", "checkpoints",
               ["sample.py", "--out_dir={c}/nano", "--data_dir={c}/nanodata"],
               setup=nanogpt_files(untie=True))
    yield case("eval_nanogpt_no_vocabulary", "paths", tool("eval", "--out_dir={c}/nano", "--data_dir={c}/nodata"),
               setup=chain(nanogpt_files(), folders("nodata")))
    # sample.py
    yield case("sample_unknown_key", "keys/types", sample("--temp=0.5"), needs=RUN)
    yield case("sample_wrong_type", "keys/types", sample("--top_k=many"), needs=RUN)
    yield case("sample_temperature_tiny", "numbers", sample("--temperature=1e-30"), needs=RUN)
    yield case("sample_temperature_inf", "numbers", sample("--temperature=1e999"), needs=RUN)
    yield case("sample_temperature_nan", "numbers", ["sample.py", "{c}/cfg.py", *sample()[1:]],
               setup=files(**{"cfg.py": "temperature = float('nan')\n"}), needs=RUN)
    yield case("sample_seed_huge", "numbers", sample("--seed=99999999999999999999"), needs=RUN)
    yield case("sample_num_threads_huge", "numbers", sample("--num_threads=100000"), needs=RUN)
    yield case("sample_num_samples_zero", "numbers", sample("--num_samples=0"), needs=RUN)
    yield case("sample_device_unknown", "keys/types", sample("--device=cpu:x"), needs=RUN)
    yield case("sample_out_dir_missing", "paths", sample("--out_dir={c}/nope"), needs=RUN)
    yield case("sample_nothing_trained", "paths", ["sample.py", "--device=cpu"], needs=RUN)
    yield case("sample_start_file_missing", "paths", sample("--start=FILE:{c}/nope.txt"), needs=RUN)
    yield case("sample_start_file_not_utf8", "damaged files", sample("--start=FILE:{c}/p.txt"),
               setup=files(**{"p.txt": b"\xff\xfe\x81"}), needs=RUN)
    yield case("sample_start_not_in_vocab", "keys/types", sample("--start=\u20ac"), needs=RUN)
    yield case("sample_ckpt_truncated", "damaged files", sample("--out_dir={c}/run"),
               setup=copy_run("run", lambda o: truncate(f"{o}/ckpt.pt", 0.5)), needs=RUN)
    yield case("sample_ckpt_garbage", "damaged files", sample("--out_dir={c}/run"),
               setup=copy_run("run", lambda o: write(f"{o}/ckpt.pt", garbage(2))), needs=RUN)
    yield case("sample_ckpt_nan_weights", "checkpoints", sample("--out_dir={c}/run"),
               setup=copy_run("run", edit_ckpts(nan_weights)), needs=RUN)
    yield case("sample_ckpt_unknown_model_args", "checkpoints", sample("--out_dir={c}/run"),
               setup=copy_run("run", edit_ckpts(unknown_model_args)), needs=RUN)
    yield case("sample_ckpt_wrong_shape", "checkpoints", sample("--out_dir={c}/run"),
               setup=copy_run("run", edit_ckpts(wrong_shape)), needs=RUN)
    yield case("sample_ckpt_int_weights", "checkpoints", sample("--out_dir={c}/run"),
               setup=copy_run("run", edit_ckpts(int_weights)), needs=RUN)
    yield case("sample_ckpt_planted", "planted code", sample("--out_dir={c}/run"),
               setup=copy_run("run", plant_ckpts), needs=RUN)
    yield case("sample_newest_out_planted", "planted code", ["sample.py", "--device=cpu", "--max_new_tokens=5"],
               setup=copy_run("out-shared", plant_ckpts), needs=RUN)
    yield case("sample_data_dir_other_tokenizer", "checkpoints", sample("--data_dir={fx}/data2"), needs=RUN + DATA2)
    yield case("sample_recorded_data_prepared_again", "checkpoints", sample("--out_dir={c}/run"),
               setup=copy_run("run", edit_ckpts(lambda ck, c: ck.update(data_dir=os.path.join(c, "data2"))),
                              also=("data2",)), needs=RUN + DATA2)
    yield case("sample_data_dir_meta_garbage", "damaged files", sample("--data_dir={c}/data"),
               setup=copy_data(lambda d: write(f"{d}/meta.json", "{")), needs=RUN)


def prepare_cases():
    """prepare.py."""
    yield case("prepare_unknown_dataset", "keys/types", ["prepare.py", "tinystories", "--out_dir={c}/data"])
    yield case("prepare_dataset_escapes", "paths", ["prepare.py", "../../shakespeare_char"])
    yield case("prepare_unknown_option", "keys/types", ["prepare.py", "shakespeare_char", "--outdir={c}/data"])
    yield case("prepare_compact_dataset_of_a_tool", "keys/types", ["prepare.py", "shakespeare_v400", "--out_dir={c}/d"])
    yield case("prepare_wikitext_dataset_of_a_tool", "keys/types", ["prepare.py", "wikitext103_v8192"])
    yield case("prepare_vocab_size_option", "keys/types",
               ["prepare.py", "shakespeare", "--vocab_size=300", "--out_dir={c}/d"])
    yield case("prepare_input_missing", "paths", ["prepare.py", "shakespeare_char", "--input={c}/nope.txt",
                                                  "--out_dir={c}/data"])
    yield case("prepare_shakespeare_input_missing", "paths", ["prepare.py", "shakespeare_char", "--out_dir={c}/data"],
               env={"SHAKESPEARE_INPUT": "{c}/nope.txt"})
    yield case("prepare_input_empty", "damaged files", ["prepare.py", "shakespeare_char", "--input={c}/in.txt",
                                                        "--out_dir={c}/data"], setup=files(**{"in.txt": ""}))
    yield case("prepare_input_not_utf8", "damaged files", ["prepare.py", "shakespeare_char", "--input={c}/in.txt",
                                                           "--out_dir={c}/data"],
               setup=files(**{"in.txt": b"abc\xff\xfe def\n"}))
    yield case("prepare_too_many_chars_over_a_dataset", "damaged files",
               ["prepare.py", "shakespeare_char", "--input={c}/in.txt", "--out_dir={c}/data"],
               setup=chain(copy_data(), files(**{"in.txt": "".join(map(chr, range(0x10000, 0x10000 + 70000)))})),
               needs=DATA)
    yield case("prepare_out_dir_is_file", "paths", ["prepare.py", "shakespeare_char", "--out_dir={c}/taken"],
               setup=files(taken="a file"))
    yield case("prepare_out_dir_read_only", "paths", ["prepare.py", "shakespeare_char", "--out_dir={c}/ro/data"],
               setup=folders("ro"), read_only="ro")
    yield case("prepare_gpt2_ranks_garbage", "damaged files",
               ["prepare.py", "shakespeare", "--gpt2_ranks={c}/r.tiktoken", "--out_dir={c}/d"],
               setup=files(**{"r.tiktoken": "not base64 ranks\n"}))


def compact_vocab_cases():
    """tools.pangu.compact_vocab (paper 003's compact tinyshakespeare)."""
    yield case("compact_for_char", "keys/types", compact("shakespeare_char", "--vocab_size=300"))
    yield case("compact_no_vocab_size", "keys/types", compact("shakespeare"))
    yield case("compact_vocab_size_twice", "keys/types", compact("shakespeare_v400", "--vocab_size=500"))
    yield case("compact_vocab_size_small", "numbers", compact("shakespeare", "--vocab_size=10"))
    yield case("compact_vocab_size_huge", "numbers", compact("shakespeare", "--vocab_size=1000000000000"))
    yield case("compact_vocab_size_not_a_number", "keys/types", compact("shakespeare", "--vocab_size=many"))
    yield case("compact_n_layer_negative", "numbers", compact("shakespeare", "--vocab_size=1024", "--n_layer=-1"))
    yield case("compact_input_empty", "damaged files", compact("shakespeare_v400", "--input={c}/in.txt"),
               setup=files(**{"in.txt": ""}))
    yield case("compact_out_dir_is_file", "paths", compact("shakespeare_v400", out_dir="{c}/taken"),
               setup=files(taken="a file"))
    yield case("compact_gpt2_ranks_garbage", "damaged files",
               compact("shakespeare_v400", "--gpt2_ranks={c}/r.tiktoken"),
               setup=files(**{"r.tiktoken": "not base64 ranks\n"}))


def wikitext_cases():
    """tools.wikitext103."""
    yield case("wikitext_dataset_unknown", "keys/types", wikitext("shakespeare_v400"))
    yield case("wikitext_vocab_size_small", "numbers", wikitext("--source={c}/wt", "--vocab_size=100"),
               setup=wikitext_folder)
    yield case("wikitext_num_proc_zero", "numbers", wikitext("--num_proc=0"))
    yield case("wikitext_num_proc_huge", "numbers", wikitext("--source={c}/wt", "--num_proc=1000000"),
               setup=wikitext_folder)
    yield case("wikitext_source_missing", "paths", wikitext("--source={c}/nope.zip"))
    yield case("wikitext_zip_garbage", "damaged files", wikitext("--source={c}/wt.zip"),
               setup=files(**{"wt.zip": b"PK\x03\x04 not really a zip"}))
    yield case("wikitext_folder_incomplete", "damaged files", wikitext("--source={c}/wt"),
               setup=files(**{"wt/wikitext-103-raw/wiki.train.raw": " = A = \n text \n"}))
    yield case("wikitext_compact_out_dir_is_file", "paths", wikitext("--source={c}/wt", "--vocab_size=400",
                                                                     out_dir="{c}/taken"),
               setup=chain(wikitext_folder, files(taken="a file")))


def eval_cases():
    """tools.eval."""
    ev = ("--out_dir={fx}/run", "--device=cpu")
    yield case("eval_unknown_key", "keys/types", tool("eval", *ev, "--split=val"), needs=RUN)
    yield case("eval_batch_size_zero", "numbers", tool("eval", *ev, "--batch_size=0"), needs=RUN)
    yield case("eval_block_size_huge", "numbers", tool("eval", *ev, "--block_size=1000000000000"), needs=RUN)
    yield case("eval_val_bin_odd_size", "damaged files", tool("eval", *ev, "--data_dir={c}/data"),
               setup=copy_data(lambda d: truncate(f"{d}/val.bin", -1)), needs=RUN)
    yield case("eval_val_bin_beyond_vocab", "damaged files", tool("eval", *ev, "--data_dir={c}/data"),
               setup=copy_data(lambda d: poke(f"{d}/val.bin", 10, b"\x00\x7f")), needs=RUN)
    yield case("eval_mc_file_garbage", "damaged files", tool("eval", *ev, "--mc_file={c}/t.jsonl"),
               setup=files(**{"t.jsonl": "{not json\n"}), needs=RUN)
    yield case("eval_mc_label_out_of_range", "damaged files", tool("eval", *ev, "--mc_file={c}/t.jsonl"),
               setup=files(**{"t.jsonl": json.dumps({"context": "a", "choices": ["b", "c"], "label": 7}) + "\n"}),
               needs=RUN)
    yield case("eval_mc_label_boolean", "damaged files", tool("eval", *ev, "--mc_file={c}/t.jsonl"),
               setup=files(**{"t.jsonl": json.dumps({"context": "a", "choices": ["b", "c"], "label": True}) + "\n"}),
               needs=RUN)
    yield case("eval_log_samples_is_folder", "paths", tool("eval", *ev, "--mc_file={c}/t.jsonl", "--log_samples={c}"),
               setup=files(**{"t.jsonl": json.dumps({"context": "a", "choices": ["b", "c"], "label": 0}) + "\n"}),
               needs=RUN)
    yield case("eval_ckpt_planted", "planted code", tool("eval", "--out_dir={c}/run", "--device=cpu"),
               setup=copy_run("run", plant_ckpts), needs=RUN)
    yield case("eval_data_dir_other_tokenizer", "checkpoints", tool("eval", *ev, "--data_dir={fx}/data2"),
               needs=RUN + DATA2)
    yield case("eval_hf_index_garbage", "hf folders", tool("eval", "--init_from={c}/hf", "--device=cpu",
                                                           "--data_dir={fx}/data"),
               setup=copy_hf(drop=("model.safetensors",), put={"model.safetensors.index.json": "{oops"}), needs=HF)


def bench_cases():
    """tools.bench and tools.bench_tokenize."""
    bn = ("--variants=gpt", "--device=cpu", "--n_layer=1", "--n_embd=16", "--n_head=2", "--block_size=16",
          "--vocab_size=32", "--seq_lens=8", "--repeats=1", "--warmup=0", "--measure=train")
    yield case("bench_unknown_key", "keys/types", tool("bench", *bn, "--repeat=3"))
    yield case("bench_unknown_variant", "keys/types", tool("bench", *bn, "--variants=nope"))
    yield case("bench_unknown_mode", "keys/types", tool("bench", *bn, "--mode=paper999"))
    yield case("bench_mode_gpu", "keys/types", tool("bench", *bn, "--mode=gpu"))
    yield case("bench_seq_lens_garbage", "keys/types", tool("bench", *bn, "--seq_lens=a,b"))
    yield case("bench_scale_zero", "numbers", tool("bench", *bn, "--scale=0"))
    yield case("bench_scale_inf", "numbers", tool("bench", *bn, "--scale=1e999"))
    yield case("bench_seed_huge", "numbers", tool("bench", *bn, "--seed=99999999999999999999"))
    yield case("bench_seed_negative", "numbers", tool("bench", *bn, "--seed=-1"))
    yield case("bench_num_threads_negative", "numbers", tool("bench", *bn, "--num_threads=-1"))
    yield case("bench_num_threads_huge", "numbers", tool("bench", *bn, "--num_threads=100000"))
    yield case("bench_out_is_folder", "paths", tool("bench", *bn, "--out={c}"))
    yield case("bench_out_folder_missing", "paths", tool("bench", *bn, "--out={c}/nope/bench.md"))
    yield case("bench_config_missing", "paths", tool("bench", "{c}/nope.py", *bn))
    yield case("one_file_out_is_folder", "paths", tool("one_file", "gpt", "--out={c}"))
    yield case("one_file_out_under_a_file", "paths", tool("one_file", "gpt", "--out={c}/f.txt/gpt.py"),
               setup=files(**{"f.txt": "a file"}))
    yield case("one_file_out_with_against", "keys/types", tool("one_file", "lgpt", "--against=gpt", "--out={c}/x.py"))
    bt = ("--mb=0.01",)
    yield case("bench_tokenize_mb_inf", "numbers", tool("bench_tokenize", "--mb=1e999"))
    yield case("bench_tokenize_mb_huge", "numbers", tool("bench_tokenize", "--mb=1e12"))
    yield case("bench_tokenize_num_proc_huge", "numbers", tool("bench_tokenize", *bt, "--num_proc=1000000"))
    yield case("bench_tokenize_gpt2_ranks_missing", "paths", tool("bench_tokenize", *bt, "--gpt2_ranks={c}/nope"))
    yield case("bench_tokenize_input_missing", "paths", tool("bench_tokenize", *bt, "--input_path={c}/nope.txt"))


def huggingface_cases():
    """tools.huggingface.convert (export, and import of damaged or unusual Hugging Face folders) and
    tools.huggingface.sample."""
    yield case("export_no_command", "keys/types", tool("huggingface.convert"))
    yield case("export_unknown_format", "keys/types", export("--format=onnx"), needs=RUN)
    yield case("export_ckpt_missing", "paths", export("--out_dir={c}/nope"), needs=RUN)
    yield case("export_out_is_file", "paths", export("--out={c}/taken"), setup=files(taken="a file"), needs=RUN)
    yield case("export_out_read_only", "paths", export("--out={c}/ro/hf"), setup=folders("ro"), read_only="ro",
               needs=RUN)
    yield case("export_ckpt_nan_weights", "checkpoints", export("--out_dir={c}/run"),
               setup=copy_run("run", edit_ckpts(nan_weights)), needs=RUN)
    yield case("export_ckpt_planted", "planted code", export("--out_dir={c}/run"),
               setup=copy_run("run", plant_ckpts), needs=RUN)
    yield case("export_data_dir_other_tokenizer", "checkpoints", export("--data_dir={fx}/data2"), needs=RUN + DATA2)
    # tools.huggingface.convert import: damaged or unusual Hugging Face folders
    yield case("hf_not_a_folder", "paths", tool("huggingface.convert", "import", "{c}/taken", "--out={c}/hf.pt"),
               setup=files(taken="a file"))
    yield case("hf_no_config", "hf folders", hf_import(), setup=copy_hf(drop=("config.json",)), needs=HF)
    yield case("hf_no_weights", "hf folders", hf_import(), setup=copy_hf(drop=("model.safetensors",)), needs=HF)
    yield case("hf_config_garbage", "hf folders", hf_import(), setup=copy_hf(put={"config.json": "{oops"}), needs=HF)
    yield case("hf_config_list", "hf folders", hf_import(), setup=copy_hf(put={"config.json": "[1, 2]"}), needs=HF)
    yield case("hf_config_unknown_arch", "hf folders", hf_import(),
               setup=copy_hf(config=dict(architectures=["BertModel"], model_type="bert")), needs=HF)
    yield case("hf_config_wrong_type", "hf folders", hf_import(), setup=copy_hf(config=dict(n_embd="sixteen")),
               needs=HF)
    yield case("hf_config_float_layers", "hf folders", hf_import(), setup=copy_hf(config=dict(n_layer=1.5)), needs=HF)
    yield case("hf_config_vocab_terabytes", "hf folders", hf_import(),
               setup=copy_hf(config=dict(vocab_size=10**12)), needs=HF)
    yield case("hf_config_positions_terabytes", "hf folders", hf_import(),
               setup=copy_hf(config=dict(n_positions=10**12)), needs=HF)
    yield case("hf_config_eps_infinite", "hf folders", hf_import(),
               setup=copy_hf(config=dict(layer_norm_epsilon=float("inf"))), needs=HF)
    yield case("hf_config_activation_unknown", "hf folders", hf_import(),
               setup=copy_hf(config=dict(activation_function="swishglu")), needs=HF)
    yield case("hf_index_garbage", "hf folders", hf_import(),
               setup=copy_hf(drop=("model.safetensors",), put={"model.safetensors.index.json": "{oops"}), needs=HF)
    yield case("hf_index_no_weight_map", "hf folders", hf_import(),
               setup=copy_hf(drop=("model.safetensors",), put={"model.safetensors.index.json": "{}"}), needs=HF)
    yield case("hf_index_weight_map_list", "hf folders", hf_import(),
               setup=copy_hf(drop=("model.safetensors",),
                             put={"model.safetensors.index.json": '{"weight_map": ["model-1.safetensors"]}'}), needs=HF)
    yield case("hf_index_missing_shard", "hf folders", hf_import(), setup=sharded_hf(missing=True), needs=HF)
    yield case("hf_index_shard_escapes", "paths", hf_import(), setup=sharded_hf(outside=True), needs=HF)
    yield case("hf_weights_truncated", "hf folders", hf_import(),
               setup=copy_hf(edit=lambda h: truncate(f"{h}/model.safetensors", 0.5)), needs=HF)
    yield case("hf_weights_header_terabytes", "hf folders", hf_import(), setup=copy_hf(edit=huge_safetensors_header),
               needs=HF)
    yield case("hf_weights_wrong_shape", "hf folders", hf_import(), setup=copy_hf(tensors=wrong_hf_shape), needs=HF)
    yield case("hf_weights_3d", "hf folders", hf_import(), setup=copy_hf(tensors=hf_3d), needs=HF)
    yield case("hf_weights_integer_dtype", "hf folders", hf_import(), setup=copy_hf(tensors=hf_int_dtype), needs=HF)
    yield case("hf_weights_nan", "hf folders", hf_import(), setup=copy_hf(tensors=hf_nan), needs=HF)
    yield case("hf_weights_extra_tensor", "hf folders", hf_import(), setup=copy_hf(tensors=hf_extra), needs=HF)
    yield case("hf_bin_planted", "planted code", hf_import(), setup=copy_hf(drop=("model.safetensors",), plant=True),
               needs=HF)
    # tools.huggingface.sample
    hs = ("--device=cpu", "--num_samples=1", "--max_new_tokens=5")
    yield case("hf_sample_no_init_from", "keys/types", tool("huggingface.sample", *hs))
    yield case("hf_sample_temperature_nan", "numbers",
               tool("huggingface.sample", "{c}/cfg.py", "--init_from={fx}/hf", *hs),
               setup=files(**{"cfg.py": "temperature = float('nan')\n"}), needs=HF)
    yield case("hf_sample_top_k_negative", "numbers",
               tool("huggingface.sample", "--init_from={fx}/hf", *hs, "--top_k=-1"),
               needs=HF)
    yield case("hf_sample_tokenizer_garbage", "hf folders", tool("huggingface.sample", "--init_from={c}/hf", *hs),
               setup=copy_hf(put={"tokenizer.json": "{oops"}), needs=HF)
    yield case("hf_sample_config_terabytes", "hf folders", tool("huggingface.sample", "--init_from={c}/hf", *hs),
               setup=copy_hf(config=dict(vocab_size=10**12)), needs=HF)
    yield case("hf_sample_data_dir_smaller_vocab", "checkpoints",
               tool("huggingface.sample", "--init_from={fx}/hf", "--data_dir={fx}/data2", "--start=a", *hs),
               needs=HF + DATA2)


def inherit_cases():
    """tools.pangu.inherit."""
    yield case("inherit_unknown_key", "keys/types", inherit("--n_layers=1"), needs=RUN)
    yield case("inherit_no_from", "keys/types", tool("pangu.inherit", "--out_dir={c}/small"))
    yield case("inherit_n_layer_too_big", "numbers", inherit("--n_layer=5"), needs=RUN)
    yield case("inherit_mlp_ratio_nan", "numbers", ["-m", "tools.pangu.inherit", "{c}/cfg.py", *inherit()[2:]],
               setup=files(**{"cfg.py": "mlp_ratio = float('nan')\n"}), needs=RUN)
    yield case("inherit_layers_unknown", "keys/types", inherit("--layers=middle"), needs=RUN)
    yield case("inherit_calib_batches_zero", "numbers", inherit("--calib_batches=0"), needs=RUN)
    yield case("inherit_calib_batch_size_huge", "numbers", inherit("--calib_batch_size=1000000000000"), needs=RUN)
    yield case("inherit_seed_negative", "numbers", inherit("--seed=-1"), needs=RUN)
    yield case("inherit_seed_huge", "numbers", inherit("--seed=99999999999999999999"), needs=RUN)
    yield case("inherit_num_threads_negative", "numbers", inherit("--num_threads=-1"), needs=RUN)
    yield case("inherit_num_threads_huge", "numbers", inherit("--num_threads=100000"), needs=RUN)
    yield case("inherit_from_missing", "paths", inherit("--init_from={c}/nope"), needs=RUN)
    yield case("inherit_out_dir_is_file", "paths", inherit("--out_dir={c}/taken"), setup=files(taken="a file"),
               needs=RUN)
    yield case("inherit_out_dir_read_only", "paths", inherit("--out_dir={c}/ro/small"), setup=folders("ro"),
               read_only="ro", needs=RUN)
    yield case("inherit_out_dir_is_source", "paths", inherit("--init_from={c}/run", "--out_dir={c}/run"),
               setup=copy_run("run"),
               needs=RUN)
    yield case("inherit_target_data_dir_missing", "paths", inherit("--target_data_dir={c}/nope"), needs=RUN)
    yield case("inherit_from_nan_weights", "checkpoints", inherit("--init_from={c}/run"),
               setup=copy_run("run", edit_ckpts(nan_weights)), needs=RUN)
    yield case("inherit_from_planted", "planted code", inherit("--init_from={c}/run"), setup=copy_run("run", plant_ckpts),
               needs=RUN)
    yield case("inherit_data_dir_other_tokenizer", "checkpoints", inherit("--data_dir={fx}/data2"), needs=RUN + DATA2)


def refine_cases():
    """tools.pangu.refine (it writes refine.npy beside the checkpoint: each case has its own copy of the run)."""
    yield case("refine_unknown_key", "keys/types", refine("--ratio=0.5"), setup=copy_run("run"), needs=RUN)
    yield case("refine_rate_zero", "numbers", refine("--rate=0"), setup=copy_run("run"), needs=RUN)
    yield case("refine_rate_nan", "numbers", ["-m", "tools.pangu.refine", "{c}/cfg.py", "--out_dir={c}/run"],
               setup=chain(copy_run("run"), files(**{"cfg.py": "rate = float('nan')\n"})), needs=RUN)
    yield case("refine_temperature_inf", "numbers", refine("--temperature=1e999"), setup=copy_run("run"), needs=RUN)
    yield case("refine_temperature_tiny", "numbers", refine("--temperature=1e-320"), setup=copy_run("run"), needs=RUN)
    yield case("refine_parts_huge", "numbers", refine("--parts=1000000000"), setup=copy_run("run"), needs=RUN)
    yield case("refine_seed_negative", "numbers", refine("--seed=-1"), setup=copy_run("run"), needs=RUN)
    yield case("refine_seed_huge", "numbers", refine("--seed=99999999999999999999"), setup=copy_run("run"), needs=RUN)
    yield case("refine_num_threads_negative", "numbers", refine("--num_threads=-1"), setup=copy_run("run"), needs=RUN)
    yield case("refine_out_dir_missing", "paths", refine("--out_dir={c}/nope"))
    yield case("refine_read_only", "paths", refine("--out_dir={c}/ro/run"), setup=copy_run("ro/run"),
               read_only="ro/run", needs=RUN)
    yield case("refine_ckpt_garbage", "damaged files", refine(),
               setup=copy_run("run", lambda o: write(f"{o}/ckpt.pt", garbage(195))), needs=RUN)
    yield case("refine_planted", "planted code", refine(), setup=copy_run("run", plant_ckpts), needs=RUN)
    yield case("refine_data_dir_other_tokenizer", "checkpoints", refine("--data_dir={fx}/data2"), setup=copy_run("run"),
               needs=RUN + DATA2)
    yield case("refine_train_bin_beyond_vocab", "damaged files", refine("--data_dir={c}/data"),
               setup=chain(copy_run("run"), copy_data(lambda d: poke(f"{d}/train.bin", 0, b"\x00\x7f"))), needs=RUN)


def compare_cases():
    """tools.compare."""
    yield case("compare_unknown_key", "keys/types", compare("--variant_list=gpt"), needs=DATA)
    yield case("compare_variants_unknown", "keys/types", compare("--variants=gpt,nope"), needs=DATA)
    yield case("compare_seeds_zero", "numbers", compare("--seeds=0"), needs=DATA)
    yield case("compare_seeds_huge", "numbers", compare("--seeds=1000000000000"), needs=DATA)
    yield case("compare_seeds_beyond_range", "numbers", compare("--seeds=[5, 18446744073709551616]"), needs=DATA)
    yield case("compare_sample_temperature_tiny", "numbers", compare("--sample_tokens=5", "--sample_temperature=1e-30"),
               needs=DATA)
    yield case("compare_sample_temperature_nan", "numbers", ["-m", "tools.compare", "{c}/cfg.py", *compare()[2:]],
               setup=files(**{"cfg.py": "sample_temperature = float('nan')\n"}), needs=DATA)
    yield case("compare_lr_inf", "numbers", compare("--learning_rate=1e999"), needs=DATA)
    yield case("compare_dir_is_file", "paths", compare("--compare_dir={c}/taken"), setup=files(taken="a file"),
               needs=DATA)
    yield case("compare_dir_read_only", "paths", compare("--compare_dir={c}/ro/cmp"), setup=folders("ro"),
               read_only="ro", needs=DATA)
    yield case("compare_custom_variant_escapes", "paths", ["-m", "tools.compare", "{c}/cfg.py", *compare()[2:],
                                                            "--variants=../../escaped"],
               setup=files(**{"cfg.py": "custom_variants = {'../../escaped': dict(variant='gpt')}\n"}), needs=DATA)
    yield case("compare_status_garbage", "damaged files", compare(),
               setup=copy_cmp(lambda d: write(f"{d}/status.json", b"\x00garbage")), needs=CMP)
    yield case("compare_status_models_list", "damaged files", compare(),
               setup=copy_cmp(lambda d: write(f"{d}/status.json", '{"models": [1, 2]}')), needs=CMP)
    yield case("compare_status_entry_not_dict", "damaged files", compare(),
               setup=copy_cmp(lambda d: write(f"{d}/status.json", '{"models": {"gpt": 5}}')), needs=CMP)
    yield case("compare_finished_other_settings", "checkpoints", compare("--learning_rate=0.01"), setup=copy_cmp(),
               needs=CMP)
    yield case("compare_log_csv_damaged", "damaged files", compare(),
               setup=copy_cmp(lambda d: write(f"{d}/gpt/log.csv", b"iter,kind\n\xff\xfe\x00\x81")), needs=CMP)
    yield case("compare_resume_planted", "planted code", compare(), setup=copy_cmp(interrupt_planted), needs=CMP)
    yield case("compare_second_writer", "second writer", compare(), setup=copy_cmp(), needs=CMP, holder="cmp")


def own_text_cases():
    """Issue 40: your own text as a dataset (prepare.py --input, compact_vocab --input); issue 48: a byte-order
    mark, CRLF line ends."""
    text = "A text of my own, for a dataset of my own.\n" * 60
    own = ("prepare.py", "--input={c}/notes.txt")
    yield case("prepare_text_binary", "damaged files", [*own],
               setup=files(**{"notes.txt": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"}))
    yield case("prepare_text_utf16", "damaged files", [*own], setup=files(**{"notes.txt": text.encode("utf-16")}))
    yield case("prepare_text_latin1", "damaged files", [*own],
               setup=files(**{"notes.txt": "caf\xe9\n".encode("latin-1")}))
    yield case("prepare_text_empty", "damaged files", [*own], setup=files(**{"notes.txt": ""}))
    yield case("prepare_text_too_short_for_val", "numbers", [*own], setup=files(**{"notes.txt": "hello\n"}))
    yield case("prepare_text_val_fraction_zero", "numbers", [*own, "--val_fraction=0"],
               setup=files(**{"notes.txt": text}))
    yield case("prepare_text_val_fraction_nan", "numbers", [*own, "--val_fraction=nan"],
               setup=files(**{"notes.txt": text}))
    yield case("prepare_text_name_escapes", "paths", [*own, "../../escaped"], setup=files(**{"notes.txt": text}))
    yield case("prepare_text_name_says_other_tokenizer", "keys/types", [*own, "notes_char", "--tokenizer=gpt2"],
               setup=files(**{"notes.txt": text}))
    yield case("prepare_text_tokenizer_unknown", "keys/types", [*own, "--tokenizer=bytes"],
               setup=files(**{"notes.txt": text}))
    yield case("prepare_text_over_another_dataset", "second writer", [*own, "--out_dir={c}/data"],
               setup=chain(copy_data(), files(**{"notes.txt": text})), needs=DATA)
    yield case("prepare_shakespeare_split_otherwise", "second writer",   # the same text, another val_fraction
               ["prepare.py", "shakespeare_char", "--out_dir={c}/data", "--val_fraction=0.5"], setup=copy_data(),
               needs=DATA)
    yield case("prepare_text_over_shakespeare_by_name", "second writer",
               [*own, "shakespeare_char", "--out_dir={c}/data"],
               setup=chain(copy_data(), files(**{"notes.txt": text})), needs=DATA)
    yield case("compact_text_over_another_dataset", "second writer",
               compact("--input={c}/notes.txt", "--vocab_size=300", out_dir="{c}/data"),
               setup=chain(copy_data(), files(**{"notes.txt": text})), needs=DATA, env=gpt2_ranks_env())
    yield case("compact_text_binary", "damaged files", compact("--input={c}/notes.txt", "--vocab_size=300"),
               setup=files(**{"notes.txt": b"\0\1\2\3" * 100}))
    # issue 48: Windows Notepad's byte-order mark is no character of the text; CRLF line ends are kept as they are
    bom = "\ufeff" + text
    yield case("prepare_text_byte_order_mark", "own text", [*own], setup=files(**{"notes.txt": bom}), expect="ok",
               check=dataset_of(text, "data/notes_char"))
    yield case("prepare_text_only_byte_order_mark", "damaged files", [*own], setup=files(**{"notes.txt": "\ufeff"}))
    yield case("prepare_text_crlf", "own text", [*own], setup=files(**{"notes.txt": text.replace("\n", "\r\n")}),
               expect="ok", check=dataset_of(text.replace("\n", "\r\n"), "data/notes_char"))
    yield case("compact_text_byte_order_mark", "own text", compact("--input={c}/notes.txt", "--vocab_size=300"),
               setup=files(**{"notes.txt": bom}), env=gpt2_ranks_env(), expect="ok", check=dataset_of(text, "d"))
    yield case("train_text_not_prepared", "paths", ["train.py", *TINY, "--dataset=notes_char", "--out_dir={c}/out"])
    yield case("train_text_too_short_for_block_size", "numbers", train("--data_dir={fx}/data2", "--block_size=5000"),
               needs=DATA2)


def vocabulary_cases():
    """Issue 40: a vocabulary checked against the model it is used with (nanoGPT's meta.pkl, meta.json, an
    ExecuTorch program's tokenizer, a GGUF's keys, prompts llama.cpp cannot encode)."""
    nano = ["sample.py", "--out_dir={c}/nano", "--data_dir={c}/nanodata", "--device=cpu"]
    yield case("sample_nanogpt_meta_pkl_smaller_vocab", "checkpoints", nano, setup=nanogpt_files(meta=char_meta(60)))
    yield case("sample_nanogpt_meta_pkl_larger_vocab", "checkpoints", nano, setup=nanogpt_files(meta=char_meta(70)))
    yield case("sample_nanogpt_meta_pkl_stoi_disagrees", "damaged files", nano,
               setup=nanogpt_files(meta=char_meta(65, shift_stoi=True)))
    yield case("sample_meta_json_chars_repeated", "damaged files", sample("--out_dir={c}/run"),
               setup=copy_run("run", edit_ckpts(lambda ck, c: ck.update(data_dir=os.path.join(c, "data"))),
                              also=("data",), edit_meta=repeat_a_char), needs=RUN)
    # ExecuTorch: a program and its tokenizer
    et = ("-m", "tools.executorch.run", "--pte={c}/model.pte", "--max_new_tokens=3", "--num_samples=1")
    yield case("et_run_tokenizer_of_another_model", "checkpoints", [*et],
               setup=copy_pte(tokenizer=other_char_tokenizer),
               needs=("pte",))
    yield case("et_run_pte_garbage", "damaged files", [*et], setup=copy_pte(edit=lambda p: write(p, garbage(7))),
               needs=("pte",))
    yield case("et_run_pte_truncated", "damaged files", [*et], setup=copy_pte(edit=lambda p: truncate(p, 0.6)),
               needs=("pte",))
    yield case("et_run_pte_method_name_damaged", "damaged files", [*et], setup=copy_pte(edit=damage_method_name),
               needs=("pte",))
    yield case("et_run_pte_identifier_damaged", "damaged files", [*et], setup=copy_pte(edit=damage_identifier),
               needs=("pte",))
    yield case("et_bench_work_dir_is_file", "paths",
               tool("executorch.bench", "--out_dirs={fx}/run", "--work_dir={c}/taken"),
               setup=files(taken="a file"), needs=RUN)
    yield case("et_bench_work_dir_read_only", "paths",
               tool("executorch.bench", "--out_dirs={fx}/run", "--work_dir={c}/ro/bench"), setup=folders("ro"),
               read_only="ro", needs=RUN)
    # llama.cpp: a GGUF's vocabulary, and prompts it cannot encode
    lc = ("-m", "tools.llamacpp.run", "--gguf={c}/model.gguf", "--max_new_tokens=3")
    yield case("llamacpp_gguf_vocab_key_wrong_type", "damaged files", [*lc],
               setup=copy_gguf(lambda p: patch_gguf_key(p, "compact_gpt.vocab_size", type_code=6)), needs=("gguf",))
    yield case("llamacpp_gguf_vocab_key_beyond_tokens", "damaged files", [*lc],
               setup=copy_gguf(lambda p: patch_gguf_key(p, "compact_gpt.vocab_size", value=10**6)), needs=("gguf",))
    yield case("llamacpp_gguf_eos_beyond_tokens", "damaged files", [*lc],
               setup=copy_gguf(lambda p: patch_gguf_key(p, "tokenizer.ggml.eos_token_id", value=10**6)),
               needs=("gguf",))
    yield case("llamacpp_gguf_no_token_list", "damaged files", [*lc],
               setup=copy_gguf(lambda p: replace_bytes(p, b"tokenizer.ggml.tokens", b"tokenizer.ggml.tokenX")),
               needs=("gguf",))
    yield case("llamacpp_start_not_in_vocab", "keys/types", [*lc, "--start=War is \u20ac~"], setup=copy_gguf(),
               needs=("gguf",))


def interrupt_cases():
    """Issue 48: text streams as it is generated, and Ctrl-C stops it there; an export stopped mid-write (Ctrl-C
    or SIGTERM) leaves the previous file as it was and no temporary file."""
    endless = ("--start=War is ", f"--max_new_tokens={10**15}")
    yield case("et_run_endless_ctrl_c", "interrupted",
               ["-c", AS_IN_A_TERMINAL, "tools.executorch.run", "--pte={c}/model.pte", *endless],
               setup=copy_pte(), needs=("pte",), expect="interrupted", signal="SIGINT",
               signal_when=printed(len("War is ") + 20), check=streamed("War is "))
    yield case("llamacpp_run_endless_ctrl_c", "interrupted",
               ["-c", AS_IN_A_TERMINAL, "tools.llamacpp.run", "--gguf={c}/model.gguf", *endless],
               setup=copy_gguf(), needs=("gguf",), expect="interrupted", signal="SIGINT",
               signal_when=printed(len("War is ") + 20), check=streamed("War is "), requires="llama_cpp")
    for sig in ("SIGINT", "SIGTERM"):
        yield case(f"llamacpp_export_{sig.lower()}_mid_write", "interrupted",
                   ["-c", PAUSED_WRITE, "tools.llamacpp.export", "--out_dir={fx}/run", "--gguf={c}/model.gguf"],
                   setup=copy_gguf(), needs=("run", "gguf"), expect="interrupted", signal=sig, signal_when=paused_write)
        yield case(f"et_export_{sig.lower()}_mid_write", "interrupted",
                   ["-c", STUB_PROGRAM + PAUSED_WRITE, "tools.executorch.export", "--out_dir={fx}/run",
                    "--pte={c}/model.pte"],
                   setup=copy_pte(), needs=("run", "pte"), expect="interrupted", signal=sig, signal_when=paused_write)


def wandb_cases():
    """W&B: found before training starts."""
    yield case("train_wandb_no_api_key", "paths", train("--wandb_log=True"), needs=DATA,
               env={"WANDB_API_KEY": "", "WANDB_MODE": "", "HOME": "{c}", "NETRC": "{c}/no-netrc"})
    yield case("train_wandb_server_unreachable", "paths", train("--wandb_log=True"), needs=DATA,
               env={"WANDB_API_KEY": "k" * 40, "WANDB_MODE": "", "WANDB_BASE_URL": "http://127.0.0.1:9"})


def size_cases():
    """Model sizes that cannot be built in reasonable time or memory, and tools.plan's picture at odd paths."""
    yield case("plan_n_layer_huge", "numbers", tool("plan", "--n_layer=100000"))
    yield case("train_n_layer_huge", "numbers", train("--n_layer=100000"), needs=DATA)
    yield case("train_weights_beyond_memory", "numbers", train("--n_layer=1000", "--n_embd=8192"), needs=DATA)
    yield case("plan_png_folder_is_file", "paths", tool("plan", "--n_layer=2", "--png={c}/taken/plan.png"),
               setup=files(taken="a file"))
    yield case("plan_png_read_only", "paths", tool("plan", "--n_layer=2", "--png={c}/ro/plan.png"), setup=folders("ro"),
               read_only="ro")


# the groups of all_cases, in the order their cases are reported
CASE_GROUPS = (
    train_cases, sample_cases, prepare_cases, compact_vocab_cases, wikitext_cases, eval_cases, bench_cases,
    huggingface_cases, inherit_cases, refine_cases, compare_cases, own_text_cases, vocabulary_cases,
    interrupt_cases, wandb_cases, size_cases,
)


# --- setup helpers: each returns setup(c, fx) or changes one file -----------------------------------------

def write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content.encode("utf-8") if isinstance(content, str) else content)


def garbage(seed):
    """4 KB of random bytes, the same every trial. Most garbage makes the unpickler raise UnpicklingError; these seeds
    make it raise IndexError (2), KeyError (20) and UnicodeDecodeError (195), which load_checkpoint once missed."""
    return random.Random(seed).randbytes(4096)


def truncate(path, keep):
    """Cut a file: keep < 0 drops that many bytes, 0 < keep < 1 keeps that fraction."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size + keep if keep < 0 else int(size * keep))


def poke(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def files(**contents):
    """setup: files under the case's folder (names may hold '/')."""
    def setup(c, fx):
        for name, content in contents.items():
            write(os.path.join(c, name), content)
    return setup


def folders(*names):
    def setup(c, fx):
        for name in names:
            os.makedirs(os.path.join(c, name), exist_ok=True)
    return setup


def chain(*setups):
    def setup(c, fx):
        for s in setups:
            s(c, fx)
    return setup


def copy_data(edit=None):
    """setup: a copy of the prepared dataset in {c}/data, then edit(folder)."""
    def setup(c, fx):
        shutil.copytree(os.path.join(fx, "data"), os.path.join(c, "data"))
        if edit:
            edit(os.path.join(c, "data"))
    return setup


def copy_run(name, edit=None, also=(), edit_meta=None):
    """setup: a copy of the trained run in {c}/<name> (its checkpoints record the fixture dataset), then
    edit(folder). also: fixture folders copied beside it; edit_meta(meta.json's dict) changes theirs."""
    def setup(c, fx):
        shutil.copytree(os.path.join(fx, "run"), os.path.join(c, name))
        for other in also:
            shutil.copytree(os.path.join(fx, other), os.path.join(c, other))
            if edit_meta:
                path = os.path.join(c, other, "meta.json")
                with open(path, encoding="utf-8") as f:
                    meta = json.load(f)
                edit_meta(meta)
                write(path, json.dumps(meta))
        if edit:
            edit(os.path.join(c, name))
    return setup


def save(path, obj):
    import torch
    torch.save(obj, path)


def edit_ckpts(fn):
    """edit for copy_run: fn(checkpoint dict, case folder) changes both checkpoints of the copy."""
    def edit(folder):
        import torch
        for name in ("ckpt.pt", "last.pt"):
            path = os.path.join(folder, name)
            ckpt = torch.load(path, weights_only=True)
            fn(ckpt, os.path.dirname(folder))
            torch.save(ckpt, path)
    return edit


def nan_weights(ckpt, c):
    ckpt["model"]["ln_f.weight"][0] = float("nan")


def unknown_model_args(ckpt, c):
    ckpt["model_args"]["attention_sinks"] = 4   # a key of a later code version


def wrong_shape(ckpt, c):
    ckpt["model"]["ln_f.weight"] = ckpt["model"]["ln_f.weight"][:-1].clone()


def int_weights(ckpt, c):
    ckpt["model"] = {k: (v * 1000).long() for k, v in ckpt["model"].items()}


class Planted:
    """Unpickling this object calls exec(code): what a shared checkpoint could do to the one who loads it."""

    def __init__(self, marker):
        self.code = f"open({marker!r}, 'w').close()"

    def __reduce__(self):
        return exec, (self.code,)


def plant_ckpts(folder):
    """edit for copy_run: both checkpoints get an extra entry whose unpickling would create the marker file."""
    import torch
    marker = os.path.join(os.path.dirname(folder), MARKER)
    for name in ("ckpt.pt", "last.pt"):
        path = os.path.join(folder, name)
        ckpt = torch.load(path, weights_only=True)
        ckpt["note"] = Planted(marker)
        torch.save(ckpt, path)


def nanogpt_files(drop="", untie=False, plant=False, meta=None):
    """setup: a checkpoint in nanoGPT's format in {c}/nano/ckpt.pt (tiny, random; its state_dict names, a 0-d tensor
    best_val_loss, torch.compile's prefix) and its data folder {c}/nanodata (meta.pkl, train.bin, val.bin). drop: a
    weight left out; untie: an lm_head other than wte; plant: a meta.pkl whose unpickling would create the marker
    file; meta: another meta.pkl content."""
    def setup(c, fx):
        import pickle
        import numpy as np
        import torch
        torch.manual_seed(0)
        chars = [chr(i) for i in range(32, 97)]
        C, V, T = 16, len(chars), 16
        sd = {"transformer.wte.weight": torch.randn(V, C), "transformer.wpe.weight": torch.randn(T, C),
              "transformer.ln_f.weight": torch.ones(C)}
        shapes = {"ln_1": (C,), "attn.c_attn": (3 * C, C), "attn.c_proj": (C, C), "ln_2": (C,),
                  "mlp.c_fc": (4 * C, C), "mlp.c_proj": (C, 4 * C)}
        sd.update({f"transformer.h.0.{k}.weight": torch.randn(*shape) for k, shape in shapes.items()})
        sd["lm_head.weight"] = torch.randn(V, C) if untie else sd["transformer.wte.weight"]
        sd.pop(drop, None)
        args = dict(n_layer=1, n_head=2, n_embd=C, block_size=T, bias=False, vocab_size=V, dropout=0.0)
        os.makedirs(os.path.join(c, "nano"))
        torch.save({"model": {"_orig_mod." + k: v for k, v in sd.items()}, "optimizer": {}, "model_args": args,
                    "iter_num": 250, "best_val_loss": torch.tensor(2.5), "config": dict(args, dataset="nanodata")},
                   os.path.join(c, "nano", "ckpt.pt"))
        data = os.path.join(c, "nanodata")
        os.makedirs(data)
        for split in ("train", "val"):
            (np.arange(200) % V).astype(np.uint16).tofile(os.path.join(data, f"{split}.bin"))
        content = meta or {"vocab_size": V, "itos": dict(enumerate(chars)),
                           "stoi": {ch: i for i, ch in enumerate(chars)}}
        if plant:
            content = dict(content, note=Planted(os.path.join(c, MARKER)))
        with open(os.path.join(data, "meta.pkl"), "wb") as f:
            pickle.dump(content, f)
    return setup


def gpt2_ranks_env():
    """GPT2_TIKTOKEN_FILE for a case that needs GPT-2's BPE, when the shared copy is here (else the trial's own)."""
    path = os.path.join(os.path.dirname(ROOT), "shared", "data", "gpt2", "gpt2.tiktoken")
    return {"GPT2_TIKTOKEN_FILE": os.environ.get("GPT2_TIKTOKEN_FILE", path)}


def char_meta(n, shift_stoi=False):
    """nanoGPT's meta.pkl content for n characters (its checkpoint in nanogpt_files has 65); shift_stoi: stoi maps
    each character to the next id, so it no longer inverts itos."""
    chars = [chr(i) for i in range(32, 32 + n)]
    return {"vocab_size": n, "itos": dict(enumerate(chars)),
            "stoi": {ch: (i + shift_stoi) % n for i, ch in enumerate(chars)}}


def repeat_a_char(meta):
    meta["chars"][1] = meta["chars"][0]   # two ids for one character: encoding would pick one of them


def copy_pte(edit=None, tokenizer=None):
    """setup: the exported program and its tokenizer in {c}; edit(program path), tokenizer(): another tokenizer."""
    def setup(c, fx):
        for name in ("model.pte", "model.tokenizer.json"):
            shutil.copy(os.path.join(fx, "pte", name), os.path.join(c, name))
        if edit:
            edit(os.path.join(c, "model.pte"))
        if tokenizer:
            write(os.path.join(c, "model.tokenizer.json"), json.dumps(tokenizer(os.path.join(c, "model.tokenizer.json"))))
    return setup


def other_char_tokenizer(path):
    """The same tokenizer.json with another character for each id (as many): another model's vocabulary."""
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    tok["model"]["vocab"] = {chr(0x400 + i): i for i in range(len(tok["model"]["vocab"]))}
    return tok


def damage_method_name(path):
    """A byte of the method name 'prefill' in the program made invalid UTF-8 (the runtime aborts decoding it)."""
    replace_bytes(path, b"prefill", b"pr\xfffill")


def damage_identifier(path):
    """The flatbuffer identifier ET12 made ET\\xce2: ExecuTorch's runtime aborts (SIGABRT) on it."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[6] ^= 0xFF
    write(path, bytes(data))


def replace_bytes(path, old, new):
    with open(path, "rb") as f:
        data = f.read()
    assert old in data, f"{old!r} not in {path}"
    write(path, data.replace(old, new, 1))


def copy_gguf(edit=None):
    def setup(c, fx):
        shutil.copy(os.path.join(fx, "gguf", "model.gguf"), os.path.join(c, "model.gguf"))
        if edit:
            edit(os.path.join(c, "model.gguf"))
    return setup


def dataset_of(text, folder):
    """check: {c}/<folder> holds the dataset of `text` exactly (its meta.json's count of characters and sha256,
    and no byte-order mark among a char vocabulary's characters)."""
    def check(c, stdout):
        with open(os.path.join(c, folder, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        record = meta["text"]
        if record["characters"] != len(text) or "\ufeff" in meta.get("chars", []):
            return f"{folder} holds {record['characters']:,} characters, the text {len(text):,}"
        if record["sha256"] != hashlib.sha256(text.encode("utf-8")).hexdigest():
            return f"{folder} is the dataset of another text (its sha256)"
        return ""
    return check


def printed(n):
    """signal_when: stdout holds n characters or more."""
    def when(stdout, stderr):
        return len(stdout) >= n
    return when


def paused_write(stdout, stderr):
    """signal_when: a command of PAUSED_WRITE is inside its write."""
    return PAUSED in stderr


def streamed(start):
    """check: what was printed before the signal is there: the prompt, then generated text, and no end."""
    def check(c, stdout):
        if not stdout.startswith(start) or len(stdout) < len(start) + 20:
            return f"stdout is {stdout[:80]!r}: not the prompt and 20 characters of text"
        return ""
    return check


def patch_gguf_key(path, key, value=None, type_code=None):
    """A GGUF key/value edited in place: the 4-byte type code after the key's name, or its 4-byte value."""
    import struct
    with open(path, "rb") as f:
        data = bytearray(f.read())
    at = data.index(key.encode()) + len(key)
    if type_code is not None:
        struct.pack_into("<I", data, at, type_code)
    if value is not None:
        struct.pack_into("<I", data, at + 4, value)
    write(path, bytes(data))


def copy_cmp(edit=None):
    def setup(c, fx):
        shutil.copytree(os.path.join(fx, "cmp"), os.path.join(c, "cmp"))
        if edit:
            edit(os.path.join(c, "cmp"))
    return setup


def interrupt_planted(folder):
    """compare_dir whose gpt run looks interrupted (status 'interrupted', last.pt to resume) with a planted last.pt."""
    with open(os.path.join(folder, "status.json"), encoding="utf-8") as f:
        status = json.load(f)
    status["models"]["gpt"]["state"] = "interrupted"
    write(os.path.join(folder, "status.json"), json.dumps(status))
    plant_ckpts(os.path.join(folder, "gpt"))


def copy_hf(drop=(), put=None, config=None, tensors=None, edit=None, plant=False):
    """setup: a copy of the exported Hugging Face folder in {c}/hf; drop files, put files ({name: content}), update
    config.json, rewrite model.safetensors with tensors(dict), edit(folder), or plant pytorch_model.bin."""

    def setup(c, fx):
        hf = os.path.join(c, "hf")
        shutil.copytree(os.path.join(fx, "hf"), hf)
        if tensors or plant:
            from safetensors.torch import load_file, save_file
            weights = load_file(os.path.join(fx, "hf", "model.safetensors"))
            if tensors:
                save_file(tensors(weights), os.path.join(hf, "model.safetensors"))
            if plant:
                import torch
                torch.save(dict(weights, note=Planted(os.path.join(c, MARKER))), os.path.join(hf, "pytorch_model.bin"))
        for name in drop:
            os.remove(os.path.join(hf, name))
        for name, content in (put or {}).items():
            write(os.path.join(hf, name), content)
        if config:
            path = os.path.join(hf, "config.json")
            with open(path, encoding="utf-8") as f:
                cfg = json.load(f)
            cfg.update(config)
            write(path, json.dumps(cfg))
        if edit:
            edit(hf)
    return setup


def wrong_hf_shape(w):
    w["transformer.wte.weight"] = w["transformer.wte.weight"][:, :8].contiguous()
    return w


def hf_3d(w):
    w["transformer.h.0.attn.c_attn.weight"] = w["transformer.h.0.attn.c_attn.weight"][None].contiguous()
    return w


def hf_int_dtype(w):
    import torch
    return {k: (v * 1000).to(torch.int32) for k, v in w.items()}


def hf_nan(w):
    w["transformer.ln_f.weight"][0] = float("nan")
    return w


def hf_extra(w):
    w["transformer.h.0.attn.extra_gate"] = w["transformer.ln_f.weight"].clone()
    return w


def huge_safetensors_header(hf):
    """model.safetensors whose header announces a tensor of terabytes (the file itself stays small)."""
    path = os.path.join(hf, "model.safetensors")
    header = {"transformer.wte.weight": {"dtype": "F32", "shape": [10**12, 16], "data_offsets": [0, 64 * 10**12]}}
    raw = json.dumps(header).encode()
    write(path, len(raw).to_bytes(8, "little") + raw + b"\0" * 64)


def sharded_hf(missing=False, outside=False):
    """setup: the export's weights as a one-shard index (model.safetensors.index.json); the shard missing, or
    named by a path that leaves the folder (a copy of it outside, which must not be read)."""
    def setup(c, fx):
        hf = os.path.join(c, "hf")
        shutil.copytree(os.path.join(fx, "hf"), hf)
        shard = "model-00001-of-00001.safetensors"
        if outside:
            os.makedirs(os.path.join(c, "elsewhere"))
            os.replace(os.path.join(hf, "model.safetensors"), os.path.join(c, "elsewhere", shard))
            shard = f"../elsewhere/{shard}"
        elif missing:
            os.remove(os.path.join(hf, "model.safetensors"))
        else:
            os.replace(os.path.join(hf, "model.safetensors"), os.path.join(hf, shard))
        from safetensors import safe_open
        source = os.path.join(fx, "hf", "model.safetensors")
        with safe_open(source, "pt") as f:
            names = list(f.keys())
        write(os.path.join(hf, "model.safetensors.index.json"),
              json.dumps({"metadata": {}, "weight_map": {n: shard for n in names}}))
    return setup


def wikitext_folder(c, fx):
    text = " \n = Title = \n \n some text here \n"
    for name in ("wiki.train.raw", "wiki.valid.raw", "wiki.test.raw"):
        write(os.path.join(c, "wt", "wikitext-103-raw", name), text)


# --- fixtures -------------------------------------------------------------------------------------------

FIXTURES = {   # name: (fixtures it needs first, argv after python)
    "data": ((), ["prepare.py", "shakespeare_char", "--out_dir={fx}/data"]),
    "data2": ((), ["prepare.py", "shakespeare_char", "--input={fx}/other.txt", "--out_dir={fx}/data2"]),
    "run": (("data",), ["train.py", *TINY, "--data_dir={fx}/data", "--out_dir={fx}/run"]),
    "hf": (("run",), ["-m", "tools.huggingface.convert", "export", "--out_dir={fx}/run", "--out={fx}/hf"]),
    "cmp": (("data",), ["-m", "tools.compare", "--variants=gpt", "--compare_dir={fx}/cmp", "--data_dir={fx}/data",
                        *TINY, "--bench_iters=0", "--sample_tokens=0"]),
    "pte": (("run",), ["-m", "tools.executorch.export", "--out_dir={fx}/run", "--pte={fx}/pte/model.pte"]),
    "gguf": (("run",), ["-m", "tools.llamacpp.export", "--out_dir={fx}/run", "--gguf={fx}/gguf/model.gguf"]),
}


def build_fixtures(names, fx, repo, env, workers):
    """Build the named fixtures (and what they need) under fx, in dependency order, `workers` at a time."""
    wanted, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += FIXTURES[name][0]
    write(os.path.join(fx, "other.txt"), "a dataset of another tokenizer: fewer characters\n" * 400)
    done = set()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        while wanted - done:
            ready = [n for n in sorted(wanted - done) if set(FIXTURES[n][0]) <= done]
            results = pool.map(lambda n: (n, run_process(FIXTURES[n][1], fx, fx, repo, env, timeout=600)), ready)
            for name, r in results:
                if r.returncode != 0:
                    raise UserError(f"building the fixture '{name}' failed: {last_lines(r.stdout + r.stderr)} "
                                    f"(fix: run `python {' '.join(FIXTURES[name][1])}` by hand to see why)")
                done.add(name)


# --- running a case -------------------------------------------------------------------------------------

def command(argv, c, fx, repo):
    argv = [a.replace("{c}", c).replace("{fx}", fx) for a in argv]
    if argv[0] not in ("-m", "-c"):
        argv[0] = os.path.join(repo, argv[0])
    return [sys.executable, *argv]


def run_process(argv, c, fx, repo, env, timeout, prefix=()):
    return subprocess.run([*prefix, *command(argv, c, fx, repo)], cwd=c, env=env, capture_output=True, text=True,
                          errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)


def run_signalled(case, c, fx, repo, env, timeout):
    """run_process for a case with a signal: its output read as it comes, case.signal sent once
    case.signal_when(stdout, stderr) holds. Raises TimeoutExpired (the process killed) after `timeout` seconds."""
    proc = subprocess.Popen(command(case.argv, c, fx, repo), cwd=c, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out, err = [], []
    readers = [threading.Thread(target=read_into, args=(proc.stdout, out)),
               threading.Thread(target=read_into, args=(proc.stderr, err))]
    for reader in readers:
        reader.start()
    deadline, sent = time.time() + timeout, False
    while proc.poll() is None:
        if not sent and case.signal_when(decoded(out), decoded(err)):
            proc.send_signal(getattr(signal, case.signal))
            sent = True
        if time.time() > deadline:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.05)
    for reader in readers:
        reader.join()
    return subprocess.CompletedProcess(proc.args, proc.returncode, decoded(out), decoded(err)), sent


def read_into(stream, parts):
    """Append what `stream` gives to parts, as it comes, until it ends."""
    while True:
        data = stream.read1(65536)
        if not data:
            return
        parts.append(data)


def decoded(parts):
    return b"".join(parts).decode("utf-8", errors="replace")


def last_lines(text, n=3):
    return " | ".join(text.strip().splitlines()[-n:])[-400:]


def snapshot(*folders):
    """{path: (size, sha256)} of every file and {path: 'dir'} of every folder under `folders` (__pycache__ left
    out: python may write it anywhere it imports from)."""
    out = {}
    for top in folders:
        for root, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for d in dirs:
                out[os.path.join(root, d)] = "dir"
            for name in names:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    out[path] = (os.path.getsize(path), hashlib.sha256(f.read()).hexdigest())
    return out


def changes(before, after, root):
    """What appeared (+), went (-) or changed (~) between two snapshots. The content of an existing writer lock
    (.lock) is left out: a writer that takes it writes its pid there before it reads the inputs only a writer may
    read (log.csv on resume, compare.py's status.json again), and the pid is all the file holds."""
    def rel(p):
        return os.path.relpath(p, root)
    out = [f"+{rel(p)}" for p in sorted(after.keys() - before.keys())]
    out += [f"-{rel(p)}" for p in sorted(before.keys() - after.keys())]
    out += [f"~{rel(p)}" for p in sorted(before.keys() & after.keys())
            if before[p] != after[p] and os.path.basename(p) != ".lock"]
    return out


def hold_lock(folder):
    """Another writer: a process that holds `folder`'s lock as fileio.lock_dir takes it (flock, its pid in
    the file) until it is stopped."""
    code = ("import fcntl, os, sys, time\nf = open(sys.argv[1], 'a+')\nfcntl.flock(f, fcntl.LOCK_EX)\nf.seek(0)\n"
            "f.truncate()\nf.write(str(os.getpid()))\nf.flush()\nprint('locked', flush=True)\ntime.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, os.path.join(folder, ".lock")], stdout=subprocess.PIPE,
                              text=True)
    if holder.stdout.readline().strip() != "locked":
        holder.kill()
        raise RuntimeError(f"could not lock {folder}")
    return holder


def read_only_prefix():
    """How a case runs when its folder is read-only: as root, permissions do not stop writes, so the command
    runs in a user namespace (`unshare -U`: root's files are no longer its own to override); None when that is
    impossible (root without unshare)."""
    if os.geteuid() != 0:
        return ()
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-U", "true"], capture_output=True).returncode == 0:
        return (unshare, "-U")
    return None


def run_case(case, root, fx, repo, env, timeout, ro_prefix):
    """('' when the case behaved, else why not; seconds it took)."""
    t0 = time.time()
    try:
        why = try_case(case, root, fx, repo, env, timeout, ro_prefix)
    except Exception as e:   # the trial's own trouble (e.g. the machine refused a process): that case fails
        why = f"the trial could not run it: {type(e).__name__}: {e}"
    return why, time.time() - t0


def try_case(case, root, fx, repo, env, timeout, ro_prefix):
    c = os.path.join(root, "cases", case.name)
    os.makedirs(c)
    if case.setup:
        case.setup(c, fx)
    holder, prefix = None, ()
    if case.holder:
        holder = hold_lock(os.path.join(c, case.holder))
    if case.read_only:
        prefix = ro_prefix
        for top, dirs, names in os.walk(os.path.join(c, case.read_only)):
            for name in names:
                os.chmod(os.path.join(top, name), 0o444)
            os.chmod(top, 0o555)
    before = snapshot(c, fx)
    sent = False
    try:
        if case.env:
            env = dict(env, **{k: v.replace("{c}", c) for k, v in case.env.items()})
        if case.signal:
            r, sent = run_signalled(case, c, fx, repo, env, timeout)
        else:
            r = run_process(case.argv, c, fx, repo, env, timeout, prefix)
    except subprocess.TimeoutExpired:
        return f"still running after {timeout:g} s"
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        if case.read_only:
            for top, dirs, names in os.walk(os.path.join(c, case.read_only)):
                os.chmod(top, 0o755)
    after = snapshot(c, fx)
    err_lines = [line for line in r.stderr.splitlines() if line.strip()]
    errors = [line for line in err_lines if line.startswith("error: ")]
    if any(MARKER in names for _, _, names in os.walk(c)):
        return "code from a planted file ran (the marker file exists)"
    if "Traceback (most recent call last)" in r.stderr + r.stdout:
        return f"traceback, exit code {r.returncode}: {last_lines(r.stderr, 1)}"
    if case.expect != "error":
        return check_outcome(case, c, fx, r, sent, before, after, root)
    if r.returncode != 1:
        return f"exit code {r.returncode}: {last_lines(r.stderr or r.stdout, 2)}"
    if len(errors) != 1 or err_lines[-1] != errors[0]:
        return f"{len(errors)} `error: ` lines, the last line on stderr is: {last_lines(r.stderr, 1)}"
    if "(fix: " not in errors[0]:
        return f"no (fix: ...) in: {errors[0][:300]}"
    changed = changes(before, after, root)
    if changed:
        return f"changed on disk: {', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''} ({errors[0][:150]})"
    return ""


def check_outcome(case, c, fx, r, sent, before, after, root):
    """'' when an interrupted or ok case (issue 48) behaved, else why not."""
    if case.expect == "interrupted":
        if not sent:
            return (f"it ended (exit code {r.returncode}) before the {case.signal}: "
                    f"{last_lines(r.stderr or r.stdout, 2)}")
        if r.returncode != 130 or not r.stderr.strip().endswith("interrupted"):
            return f"exit code {r.returncode} after {case.signal} (not 130), stderr ends: {last_lines(r.stderr, 1)}"
        changed = changes(before, after, root)
    else:
        if r.returncode != 0:
            return f"exit code {r.returncode}: {last_lines(r.stderr or r.stdout, 2)}"
        fixtures = fx + os.sep
        changed = changes({p: v for p, v in before.items() if p.startswith(fixtures)},
                          {p: v for p, v in after.items() if p.startswith(fixtures)}, root)
    if changed:
        return f"changed on disk: {', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}"
    return case.check(c, r.stdout) if case.check else ""


def missing_modules(cases):
    """The modules some case requires that this Python cannot import."""
    missing = set()
    for name in {case.requires for case in cases if case.requires}:
        try:
            __import__(name)
        except ImportError:
            missing.add(name)
    return missing


# --- the command ----------------------------------------------------------------------------------------

def select(cases, patterns):
    if not patterns:
        return cases
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    unknown = [p for p in wanted if not any(fnmatch.fnmatchcase(c.name, p) for c in cases)]
    if unknown:
        raise UserError(f"no case matches {', '.join(unknown)} (fix: see `python -m tests.fault_trial --list`)")
    return [c for c in cases if any(fnmatch.fnmatchcase(c.name, p) for p in wanted)]


def trial(cfg):
    if cfg["workers"] < 1 or not cfg["timeout"] > 0:
        raise UserError("--workers must be >= 1 and --timeout > 0 (fix: --workers=2 --timeout=120)")
    cases = select(all_cases(), cfg["cases"])
    if cfg["list"]:
        for case in cases:
            print(f"{case.name:42} {case.kind}")
        print(f"{len(cases)} cases")
        return 0
    t0 = time.time()
    root = tempfile.mkdtemp(prefix="fault_trial.")
    ro_prefix = read_only_prefix()
    if ro_prefix is None:
        skipped = [c.name for c in cases if c.read_only]
        print(f"note: running as root without `unshare`, a read-only folder cannot be tested: skipped "
              f"{', '.join(skipped)}")
        cases = [c for c in cases if not c.read_only]
    missing = missing_modules(cases)
    if missing:
        skipped = [c.name for c in cases if c.requires in missing]
        print(f"note: {', '.join(sorted(missing))} not installed here: skipped {', '.join(skipped)}")
        cases = [c for c in cases if c.requires not in missing]
    try:
        repo = os.path.join(root, "repo")
        shutil.copytree(ROOT, repo, ignore=COPY_IGNORE)
        code = snapshot(repo)   # no command may write beside the code either (e.g. a path taken from its folder)
        fx = os.path.join(root, "fixtures")
        env = dict(os.environ, PYTHONPATH=repo, OMP_NUM_THREADS="1", MPLBACKEND="Agg", HF_HUB_OFFLINE="1")
        # the copy leaves data/ out, the shipped tinyshakespeare with it: the fixtures read the repository's
        env.setdefault("SHAKESPEARE_INPUT", os.path.join(ROOT, "data", "tinyshakespeare", "input.txt"))
        build_fixtures({n for c in cases for n in c.needs}, fx, repo, env, cfg["workers"])
        print(f"fixtures built in {time.time() - t0:.0f} s; {len(cases)} cases, {cfg['workers']} at a time", flush=True)
        failed = 0
        with concurrent.futures.ThreadPoolExecutor(cfg["workers"]) as pool:
            results = pool.map(lambda case: run_case(case, root, fx, repo, env, cfg["timeout"], ro_prefix), cases)
            for case, (why, seconds) in zip(cases, results):
                failed += bool(why)
                print(f"{'FAIL' if why else 'ok':4} {case.name} [{case.kind}, {seconds:.1f} s]"
                      + (f": {why}" if why else ""), flush=True)
        changed = changes(code, snapshot(repo), root)
        if changed:
            failed += 1
            print(f"FAIL the copy of the code changed: {', '.join(changed[:4])}")
        print(f"{len(cases)} cases: {len(cases) - failed} ok, {failed} fail ({time.time() - t0:.0f} s)")
    finally:
        if cfg["keep"]:
            print(f"kept {root}")
        else:
            for top, dirs, _ in os.walk(root):   # a failed case may have left a folder read-only
                for d in dirs:
                    os.chmod(os.path.join(top, d), 0o755)
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


def main(argv=None):
    sys.exit(run_command(trial, DEFAULTS, argv))


if __name__ == "__main__":
    main(sys.argv[1:])
