"""tests/mutation.py's mechanism stays honest: a real mutant is caught, a harmless edit is reported missed (exit 1),
and a mutant whose old text is gone fails the command before anything runs. The full table is run by hand
(`python -m tests.mutation`, minutes); here one small test selection, in two scratch copies plus the baseline.
And every GPTConfig field names, in FIELD_MUTANTS, the mutants that break its code (issue 56)."""
import dataclasses
import os
import re

import pytest

import mutation
from model import GPTConfig


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


FIX = "add a mutant to tests/mutation.py's MUTANTS and name it in FIELD_MUTANTS"


def field_table_problems(table, fields, mutant_names):
    """What is wrong with a field -> mutants table (FIELD_MUTANTS), one line each: fields without an entry, keys
    that are not fields, entries that are not a non-empty tuple of names of MUTANTS, then the order."""
    problems = []
    missing = [name for name in fields if name not in table]
    if missing:
        problems.append(f"GPTConfig fields without a mutant: {', '.join(missing)} (fix: {FIX})")
    unknown = [name for name in table if name not in fields]
    if unknown:
        problems.append(f"FIELD_MUTANTS names fields GPTConfig does not have: {', '.join(unknown)} "
                        f"(fix: rename or remove them)")
    for field, names in table.items():
        if not isinstance(names, tuple) or not names:
            problems.append(f"{field}: {names!r} is not a non-empty tuple of mutant names (fix: {FIX})")
            continue
        strangers = [name for name in names if name not in mutant_names]
        if strangers:
            problems.append(f"{field}: {', '.join(strangers)} not in MUTANTS (fix: {FIX})")
    if not missing and not unknown and list(table) != list(fields):
        problems.append("FIELD_MUTANTS is not in GPTConfig's field order (fix: move its keys)")
    return problems


def test_every_gptconfig_field_names_the_mutants_that_guard_it():
    """Issue 56: a new GPTConfig field fails here until a mutant of its code is in the table, so its tests are
    proven to catch a bug in it (`python -m tests.mutation --only=NAME` runs that mutant)."""
    fields = [f.name for f in dataclasses.fields(GPTConfig)]
    mutant_names = {m.name for m in mutation.MUTANTS}
    problems = field_table_problems(mutation.FIELD_MUTANTS, fields, mutant_names)
    assert not problems, "\n".join(problems)


def test_a_field_table_gap_is_named_with_its_fix():
    """The check above finds each kind of gap: a field left out, a key that is no field, an empty entry, a name
    that is no mutant."""
    fields = ["block_size", "dropout", "new_flag"]
    table = {"block_size": (), "dropout": ("attention_dropout_in_eval", "no_such_mutant"), "dropuot": ("x",)}
    problems = field_table_problems(table, fields, {"attention_dropout_in_eval", "x"})
    assert problems == [
        f"GPTConfig fields without a mutant: new_flag (fix: {FIX})",
        "FIELD_MUTANTS names fields GPTConfig does not have: dropuot (fix: rename or remove them)",
        f"block_size: () is not a non-empty tuple of mutant names (fix: {FIX})",
        f"dropout: no_such_mutant not in MUTANTS (fix: {FIX})",
    ]
    ordered = {"dropout": ("x",), "block_size": ("x",), "new_flag": ("x",)}
    assert field_table_problems(ordered, fields, {"x"}) == [
        "FIELD_MUTANTS is not in GPTConfig's field order (fix: move its keys)"]


def test_docs_give_the_number_of_mutants():
    """docs/tests.md's count of the table's mutants is the table's."""
    with open(os.path.join(mutation.ROOT, "docs", "tests.md"), encoding="utf-8") as f:
        stated = re.search(r"(\d+) small realistic bugs", f.read())
    assert stated and int(stated.group(1)) == len(mutation.MUTANTS), (
        f"docs/tests.md says {stated and stated.group(1)} mutants, tests/mutation.py has {len(mutation.MUTANTS)} "
        f"(fix: the count in docs/tests.md's Mutation check)")
