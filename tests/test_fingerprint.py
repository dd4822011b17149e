"""tools/fingerprint.py's comparison: bit-identical, within float tolerance (another CPU's kernels), or differ."""
import json
import os
import types

import torch

from conftest import ROOT, one_error_line
from tools.fingerprint import RTOL, compare, floats


def test_fingerprint_tells_exact_from_close_from_different():
    x = torch.randn(2, 24, 97, generator=torch.Generator().manual_seed(0))
    rms = x.pow(2).mean().sqrt()
    want = floats(x)
    assert compare("logits", want, floats(x.clone())) == "exact"
    # float32 rounding-level noise, as another CPU's kernels give (measured up to 8.3e-6 of the RMS)
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    assert compare("logits", want, floats(x + 1e-6 * rms * noise)) == "close"
    # a change a refactor would make: one position's logits moved by 1%
    moved = x.clone()
    moved[0, 7] *= 1.01
    assert compare("logits", want, floats(moved)) == "differ"
    assert compare("weights", want, floats(x + 1e-6 * rms * noise)) == "differ"   # weights' bound is 1e-6 of the RMS
    assert RTOL["weights"] < RTOL["logits"]
    # hashes (tokens, losses) are exact or differ, never close
    assert compare("tokens_kv1", "abc", "abc") == "exact" and compare("tokens_kv1", "abc", "abd") == "differ"


def test_check_of_a_file_that_is_not_fingerprints_is_one_line_before_the_work(tmp_path, monkeypatch):
    """--check=README.md ended in a JSONDecodeError traceback, after the minute of runs it compares (a hunt)."""
    from tools import fingerprint

    def no_work(name):
        raise AssertionError("the work ran before the file was read")

    monkeypatch.setattr(fingerprint, "model_prints", no_work)
    for text in ("# a README\n", "[1, 2]\n", '{"gpt": 3}\n'):
        (tmp_path / "f.json").write_text(text)
        one_error_line(fingerprint.main, [f"--check={tmp_path / 'f.json'}"], "is not a file of fingerprints")


def committed():
    with open(os.path.join(ROOT, "results", "fingerprint.json")) as f:
        return json.load(f)


def test_a_small_presets_fingerprints_match_the_committed_file(one_thread):
    """tools.fingerprint --check compares with results/fingerprint.json: the baseline preset (0.2 s) prints what
    the file holds, tokens bit-identical, floats at least within tolerance on another CPU (exact on the machine
    that wrote it) (a hunt: a changed line did this, and no test failed: a shorter hash, another projection seed,
    RMS, re-draw std or model seed). A torch upgrade that draws other numbers fails it until the file is written
    again (python -m tools.fingerprint > results/fingerprint.json, as for any refactor's new baseline)."""
    from tools.fingerprint import model_prints
    want, got = committed()["baseline"], model_prints("baseline")
    assert set(got) == set(want) - {"train_losses"}
    for key in got:
        allowed = ("exact",) if key.startswith("tokens") else ("exact", "close")
        assert compare(key, want[key], got[key]) in allowed, key


def test_the_uncached_tokens_come_from_generating_without_the_cache(monkeypatch, one_thread):
    """tokens_kv0 fingerprints greedy and sampled decoding without the KV cache: a refactor breaking only the
    uncached greedy path shows in it (a hunt: a changed line did this, and no test failed)."""
    from model import GPT
    from tools.fingerprint import model_prints
    generate = GPT.generate

    def broken(self, idx, n, temperature=1.0, use_kv_cache=True, **kwargs):
        out = generate(self, idx, n, temperature=temperature, use_kv_cache=use_kv_cache, **kwargs)
        if temperature == 0 and not use_kv_cache:
            out = out.clone()
            out[0, -1] = (out[0, -1] + 1) % self.config.vocab_size
        return out

    monkeypatch.setattr(GPT, "generate", broken)
    want, got = committed()["baseline"], model_prints("baseline")
    assert compare("tokens_kv1", want["tokens_kv1"], got["tokens_kv1"]) == "exact"
    assert compare("tokens_kv0", want["tokens_kv0"], got["tokens_kv0"]) == "differ"


def test_the_float_tolerance_is_relative_to_the_tensors_rms():
    """Weights of RMS 0.02 (as initialised) moved by 5e-6 of their RMS, 5x the weights' tolerance, differ (a hunt:
    a changed line did this, and no test failed: an absolute bound of 1e-6 let them pass)."""
    w = 0.02 * torch.randn(10000, generator=torch.Generator().manual_seed(0))
    noise = torch.randn(10000, generator=torch.Generator().manual_seed(1))
    assert compare("weights", floats(w), floats(w + 5e-6 * 0.02 * noise)) == "differ"
    assert compare("weights", floats(w), floats(w + 1e-8 * 0.02 * noise)) == "close"


def test_the_training_fingerprint_reads_the_val_losses(tmp_path, monkeypatch):
    """Two 6-iteration runs whose log.csv differ only in a val loss have different train_losses fingerprints (a
    hunt: a changed line did this, and no test failed)."""
    from tools import fingerprint
    val = ["2.5"]

    def run(cmd, **kwargs):
        out_dir = next(a for a in cmd if a.startswith("--out_dir=")).split("=", 1)[1]
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "log.csv"), "w") as f:
            f.write(f"iter,kind,loss,val_loss\n0,eval,4.2,{val[0]}\n1,train,4.1,\n")

    monkeypatch.setattr(fingerprint, "subprocess", types.SimpleNamespace(run=run))
    first = fingerprint.run_prints("gpt", str(tmp_path))
    val[0] = "2.6"
    assert fingerprint.run_prints("gpt", str(tmp_path)) != first


def fake_work(monkeypatch, changed=None):
    """tools.fingerprint's work replaced by the committed gpt and lgpt fingerprints (`changed`: (preset, key) made
    to differ); an AssertionError if it runs at all when changed is "no work"."""
    from tools import fingerprint
    want = committed()

    def model_prints(name):
        if changed == "no work":
            raise AssertionError("the work ran before the file was read")
        out = {k: v for k, v in want[name].items() if k != "train_losses"}
        if changed and changed[0] == name:
            out[changed[1]] = "0" * 16
        return out

    monkeypatch.setattr(fingerprint.variants, "available", lambda: ["gpt", "lgpt"])
    monkeypatch.setattr(fingerprint, "RUNS", ("gpt", "lgpt"))
    monkeypatch.setattr(fingerprint, "model_prints", model_prints)
    monkeypatch.setattr(fingerprint, "run_prints", lambda name, tmp: want[name]["train_losses"])
    return fingerprint, want


def test_check_refuses_a_binary_file_or_one_with_a_non_preset_key_before_the_work(tmp_path, monkeypatch):
    """--check=<a binary file> and --check=<a file whose "note" is not a preset's fingerprints> are the one-line
    "not a file of fingerprints", before the work (a hunt: a changed line did this, and no test failed: a
    UnicodeDecodeError traceback; the mixed file was compared after the minute of work)."""
    fingerprint, want = fake_work(monkeypatch, "no work")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00binary")
    one_error_line(fingerprint.main, [f"--check={tmp_path / 'bin.json'}"], "is not a file of fingerprints")
    (tmp_path / "mixed.json").write_text(json.dumps({"gpt": want["gpt"], "note": "x"}))
    one_error_line(fingerprint.main, [f"--check={tmp_path / 'mixed.json'}"], "is not a file of fingerprints")


def test_check_of_a_folder_says_it_is_a_folder(tmp_path, monkeypatch):
    """--check=<a folder> said "no such file (fix: write one first with python -m tools.fingerprint > FOLDER)",
    a fix that fails on a folder (a hunt found it: the folder exists)."""
    fingerprint, _ = fake_work(monkeypatch, "no work")
    message = one_error_line(fingerprint.main, [f"--check={tmp_path}"], "is a folder",
                             f"--check={tmp_path / 'fingerprint.json'}")
    assert "no such file" not in message


def test_check_exits_1_on_one_difference_or_a_preset_missing_from_the_file(tmp_path, monkeypatch, capsys):
    """--check exits 0 when every fingerprint is the file's, 1 when a single one differs, and 1 when a preset
    (added since the file was written) is missing from it (a hunt: a changed line did this, and no test failed:
    one difference, or a missing preset, exited 0)."""
    full, part = tmp_path / "full.json", tmp_path / "part.json"
    want = committed()
    full.write_text(json.dumps({"gpt": want["gpt"], "lgpt": want["lgpt"]}))
    part.write_text(json.dumps({"gpt": want["gpt"]}))
    fingerprint, _ = fake_work(monkeypatch)
    assert fingerprint.main([f"--check={full}"]) == 0
    assert fingerprint.main([f"--check={part}"]) == 1
    assert "differ: lgpt." in capsys.readouterr().out
    fingerprint, _ = fake_work(monkeypatch, ("gpt", "tokens_kv1"))
    assert fingerprint.main([f"--check={full}"]) == 1
    assert "1 differ: gpt.tokens_kv1;" in capsys.readouterr().out
