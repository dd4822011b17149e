"""tools/fingerprint.py's comparison: bit-identical, within float tolerance (another CPU's kernels), or differ."""
import torch

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
    from conftest import one_error_line
    from tools import fingerprint

    def no_work(name):
        raise AssertionError("the work ran before the file was read")

    monkeypatch.setattr(fingerprint, "model_prints", no_work)
    for text in ("# a README\n", "[1, 2]\n", '{"gpt": 3}\n'):
        (tmp_path / "f.json").write_text(text)
        one_error_line(fingerprint.main, [f"--check={tmp_path / 'f.json'}"], "is not a file of fingerprints")
