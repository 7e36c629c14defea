"""The documentation's frame: README.md short, every relative link in README.md and docs/*.md a file of
the repo (and an anchor, a heading of that file), no test function names, nothing outside the repo."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    found = set()
    for title in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_the_readme_fits_on_about_200_lines():
    assert len((REPO / "README.md").read_text().splitlines()) <= 220


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_of_the_repo(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        outside = not file.is_file() or REPO not in file.parents
        if outside or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert not broken, f"{doc.name}: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_test_function_names_and_nothing_outside_the_repo(doc):
    text = doc.read_text()
    names = re.findall(r"::test_\w+|\btest_[a-z0-9_]+\(|(?<![/.\w])test_[a-z0-9]+_[a-z0-9_]+(?!\.py|[\w/])", text)
    assert not names, f"{doc.name} names tests (name their files instead): {names[:5]}"
    assert "../shared" not in text
