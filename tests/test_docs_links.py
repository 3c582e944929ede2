"""Every relative link of README.md and docs/ points to a file that exists, and every #anchor into a
Markdown file to one of its headings (GitHub's anchors), so that moving a section from one page to
another cannot leave a link behind. Reads the files only: no model, no network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^\s*(```|~~~)")
# [text](target) and ![alt](target), the target up to a space (a title may follow) or the closing parenthesis
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(text: str):
    """The lines of a Markdown text outside fenced code blocks, with their numbers."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text without markup, lower case, punctuation dropped
    (letters, digits, spaces, hyphens and underscores kept), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(page: Path):
    """(line number, target) of each link of a page outside code (fenced blocks and `inline code`)."""
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group(1)


def is_external(target: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*:", target) is not None  # http:, https:, mailto: ...


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for number, target in links(page):
        if is_external(target):
            continue
        path, _, anchor = target.partition("#")
        file = page if not path else (page.parent / path).resolve()
        where = f"{page.relative_to(root)}:{number}: {target}"
        if not file.exists():
            broken.append(f"{where} (no such file)")
        elif not file.resolve().is_relative_to(root):
            broken.append(f"{where} (outside the repository)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{where} (no heading with this anchor in {file.relative_to(root)})")
    return broken


def test_the_slugs_are_githubs():
    assert slug("GPUs: H100 and H200 against OpenNMT-py 3.5.1") == "gpus-h100-and-h200-against-opennmt-py-351"
    assert slug("The tool: `attnmt compare`") == "the-tool-attnmt-compare"
    assert slug("What it does: Multi30k German → English") == "what-it-does-multi30k-german--english"
    assert slug("Towards given links: self-training, or eflomal's links") == (
        "towards-given-links-self-training-or-eflomals-links"
    )


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Part\n\n[ok](#part) [file](b.md) [bad](#nothing) [gone](c.md)\n")
    (tmp_path / "b.md").write_text("```\n[not a link](x.md)\n```\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == [
        "a.md:5: #nothing (no heading with this anchor in a.md)",
        "a.md:5: c.md (no such file)",
    ]
    assert broken_links(tmp_path / "b.md", tmp_path) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert broken_links(page) == []
