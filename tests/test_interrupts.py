"""Ctrl-C and SIGTERM in the middle of an export's write (issue 48): the previous file stays as it was, no
temporary file is left beside it, no traceback is printed, and the command ends with exit code 130 and the line
`interrupted` (configurator.run_command), as train.py's interruption does.

SIGTERM's default ends a process where it stands, so atomic_path used to leave its temporary file (a GGUF export's
65 MB); it now makes SIGTERM raise KeyboardInterrupt while it writes (fileio.sigterm_as_interrupt), and its
cleanup runs as on Ctrl-C. Each test runs the real command in a subprocess whose atomic writes pause once the
temporary file is written (tests.fault_trial.PAUSED_WRITE) and sends the signal then: deterministic, a few
seconds. ExecuTorch's lowering (30 s and more) is replaced by fixed bytes (STUB_PROGRAM): the write is what is
tested, and no executorch is needed.
"""
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from conftest import ROOT, write_char_checkpoint
from safety_net import fileio
from safety_net.fileio import atomic_path
from fault_trial import PAUSED, PAUSED_WRITE, STUB_PROGRAM, STUB_PTE
from model import GPT, GPTConfig

CHARS = list("\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
EXPORTS = {   # tool: (the driver's code, the output option, the files it writes)
    "llamacpp": (PAUSED_WRITE, "--gguf", ["model.gguf"]),
    "executorch": (STUB_PROGRAM + PAUSED_WRITE, "--pte", ["model.pte", "model.tokenizer.json"]),
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """out_dir of a tiny char-level checkpoint (its dataset's meta.json recorded)."""
    model = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, vocab_size=len(CHARS), block_size=16))
    return write_char_checkpoint(tmp_path_factory.mktemp("interrupts"), model, CHARS)


# Each tool and each signal once in the default suite (a process each, about 6 s); the other two pairs run with
# -m slow. The write under test is fileio.atomic_path, the same for both tools; SIGTERM's handler and the
# cleanup are also checked in this process below (test_atomic_path_turns_sigterm_into_an_interrupt_while_it_writes).
STOPPED_EXPORTS = [
    ("executorch", "SIGTERM"),
    ("llamacpp", "SIGINT"),
    pytest.param("executorch", "SIGINT", marks=pytest.mark.slow),
    pytest.param("llamacpp", "SIGTERM", marks=pytest.mark.slow),
]


def previous_export(path):
    """Files an earlier export wrote at path, which an export replaces (it refuses any other file): a GGUF file
    holding the export's vocabulary key; the stub program, its tokenizer beside it."""
    if path.suffix == ".gguf":
        import gguf
        from tools.llamacpp.export import MODEL_VOCAB_KEY
        writer = gguf.GGUFWriter(str(path), "gpt2")
        writer.add_uint32(MODEL_VOCAB_KEY, len(CHARS))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.close()
    else:
        path.write_bytes(STUB_PTE + b" the previous program")
        path.with_suffix(".tokenizer.json").write_text("the previous tokenizer")


@pytest.mark.parametrize("tool, sig", STOPPED_EXPORTS)
def test_export_stopped_mid_write_keeps_the_previous_file_and_no_temporary_one(tool, sig, tiny_run, tmp_path):
    if tool == "llamacpp":
        pytest.importorskip("gguf", reason="gguf is not installed (pip install -r requirements-dev.txt)")
    code, option, names = EXPORTS[tool]
    folder = tmp_path / "exported"
    folder.mkdir()
    previous_export(folder / names[0])
    previous = {p.name: p.read_bytes() for p in folder.iterdir()}
    proc = subprocess.Popen([sys.executable, "-c", code, f"tools.{tool}.export", f"--out_dir={tiny_run}",
                             f"{option}={folder / names[0]}"], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, proc.kill)   # a command that never pauses fails the test, not the suite
    watchdog.start()
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith(PAUSED):
                temporary = line.split()[-1]
                assert os.path.getsize(temporary) > 0 and os.path.dirname(temporary) == str(folder)
                proc.send_signal(getattr(signal, sig))
                sent = time.time()
                break
        else:
            pytest.fail(f"the export never paused: {''.join(lines)[-2000:]}")
        err = "".join(lines) + proc.stderr.read()
        proc.wait()
    finally:
        watchdog.cancel()
    ended = f"exit code {proc.returncode}, {time.time() - sent:.1f} s after the signal"   # -9: the watchdog's
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "interrupted", f"{ended}\n{err[-2000:]}"
    assert "Traceback" not in err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == previous   # nothing else: no temporary file


def test_atomic_path_turns_sigterm_into_an_interrupt_while_it_writes(tmp_path):
    """While the temporary file lives, SIGTERM raises KeyboardInterrupt (the cleanup runs); before and after, the
    handler is the one there was. A handler of the caller's own (train.py's StopRequest) is left alone."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are the main thread's")
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with atomic_path(tmp_path / "a.bin") as tmp:
            assert signal.getsignal(signal.SIGTERM) is fileio.raise_keyboard_interrupt
            with atomic_path(tmp_path / "b.bin"):   # nested: the outer write's handler stays
                assert signal.getsignal(signal.SIGTERM) is fileio.raise_keyboard_interrupt
            with pytest.raises(KeyboardInterrupt):
                with atomic_path(tmp_path / "c.bin") as c_tmp:
                    os.kill(os.getpid(), signal.SIGTERM)
                    torch.zeros(1)   # the handler runs between bytecodes
            assert not os.path.exists(c_tmp)
            open(tmp, "wb").close()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin"]

        def own(signum, frame):
            pass

        signal.signal(signal.SIGTERM, own)
        with atomic_path(tmp_path / "d.bin"):
            assert signal.getsignal(signal.SIGTERM) is own
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_process_forked_during_a_write_ends_on_sigterm(tmp_path):
    """A worker forked while atomic_path writes (tools/wikitext103.py tokenizes in a Pool inside its write) has
    SIGTERM's default: a Pool ends its workers with SIGTERM when it closes, and a worker that raised
    KeyboardInterrupt instead hung the suite there."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are the main thread's")
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with atomic_path(tmp_path / "a.bin"):
            pool = multiprocessing.get_context("fork").Pool(1)
            in_the_worker = pool.apply(signal.getsignal, (signal.SIGTERM,))
            pool.close()   # not terminate(): a worker that ignored its SIGTERM would hang the test
            pool.join()
            assert signal.getsignal(signal.SIGTERM) is fileio.raise_keyboard_interrupt   # in the writer itself
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert in_the_worker == signal.SIG_DFL
