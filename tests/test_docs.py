"""The Markdown texts point at files that exist: every relative link and image of README.md, docs/ and results/
(a results page that links samples a run never wrote, or a figure that was not kept, sends a reader nowhere)."""
import glob
import os
import re

from conftest import ROOT

# [text](target) and ![alt](target); the target up to a space (a title) or the closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)")


def relative_targets(text):
    """The link targets of a Markdown text that name a file of the repository: no URL, no anchor alone."""
    for target in LINK.findall(text):
        path = target.split("#")[0]
        if path and "://" not in path and not path.startswith("mailto:"):
            yield path


def markdown_files():
    names = ["README.md"] + glob.glob("docs/**/*.md", recursive=True) + glob.glob("results/**/*.md", recursive=True)
    return [os.path.join(ROOT, n) for n in sorted(set(names))]


def test_every_relative_link_finds_its_file(monkeypatch):
    monkeypatch.chdir(ROOT)
    missing = []
    for md in markdown_files():
        with open(md, encoding="utf-8") as f:
            text = f.read()
        for path in relative_targets(text):
            if not os.path.exists(os.path.join(os.path.dirname(md), path)):
                missing.append(f"{os.path.relpath(md, ROOT)}: {path}")
    assert len(markdown_files()) > 20   # the texts were found
    assert not missing, "links to nothing:\n" + "\n".join(missing)


def test_a_link_to_nothing_is_found():
    text = "See [the samples](samples.md), ![a figure](fig.png \"title\"), [a page](https://x.org/a.md), [up](#top)."
    assert list(relative_targets(text)) == ["samples.md", "fig.png"]
