"""tests/mutation.py's mechanism stays honest: a real mutant is caught, a harmless edit is reported missed (exit 1),
and a mutant whose old text is gone fails the command before anything runs. The full table is run by hand
(`python -m tests.mutation`, minutes); here one small test selection, in two scratch copies plus the baseline."""
import pytest

import mutation


@pytest.mark.slow   # a check of the check (20 s): `python -m tests.mutation` runs every mutant
def test_a_real_bug_is_caught_and_a_harmless_edit_is_missed(monkeypatch, capsys):
    real = next(m for m in mutation.MUTANTS if m.name == "swiglu_activation_on_both_branches")
    harmless = mutation.Mutant("comment_edit", "model.py", "# --- 1. Configuration", "# --- 1. The configuration",
                               real.tests, every=False)
    monkeypatch.setattr(mutation, "MUTANTS", [real, harmless])
    with pytest.raises(SystemExit) as e:
        mutation.main(["--workers=2"])
    out = capsys.readouterr().out.splitlines()
    assert e.value.code == 1
    assert out[0].startswith("caught  swiglu_activation_on_both_branches")
    assert out[1].startswith("missed  comment_edit") and out[-1] == "1 of 2 mutants caught"


def test_a_mutant_whose_text_is_gone_fails_the_command(monkeypatch, capsys):
    gone = mutation.Mutant("gone", "model.py", "this text is not in model.py", "", "tests/test_model.py", every=False)
    monkeypatch.setattr(mutation, "MUTANTS", [mutation.MUTANTS[0], gone])
    with pytest.raises(SystemExit) as e:
        mutation.main([f"--only={mutation.MUTANTS[0].name}"])   # the whole table is checked, not just the chosen
    assert e.value.code == 1
    assert capsys.readouterr().out.splitlines() == [
        "rotten  gone: its old text is found 0 times in model.py (must be once)",
        "1 of 2 mutants no longer apply: update the table in tests/mutation.py"]


def test_every_mutant_applies_and_names_its_tests():
    """The committed table: unique names, each old text once in its file, every selection under tests/."""
    assert len({m.name for m in mutation.MUTANTS}) == len(mutation.MUTANTS)
    assert [m.name for m in mutation.MUTANTS if mutation.rotten(m)] == []
    assert all(m.tests.startswith("tests/test_") and m.old != m.new for m in mutation.MUTANTS)
