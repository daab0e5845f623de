"""The repository is self-contained: no reference to documents outside it, no dangling doc link.

Every tracked text file is scanned (``git ls-files``). A reference to the design notes the project
started from (kept outside the repository) fails with file:line; so does a ``docs/<name>.md``
that does not exist, a Markdown link to a missing heading, and a ``semantics §N`` section that
``docs/semantics.md`` does not have.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()
_TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".conf", ".txt", ".cfg", ".ini", ".sh"}
_TEXT_NAMES = {"Dockerfile", "run", "audit", ".gitignore", ".dockerignore"}

# Names of the outside notes; the in-repo pages take other names (docs/formats.md).
_OUTSIDE = re.compile(
    r"jev-semantics|celery-notes|prior-art|DESIGN\.md|\.\./shared|/work/shared|trace-formats"
)
_DOC_PATH = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)")
_MD_LINK = re.compile(r"\]\(((?:docs/)?[A-Za-z0-9_.-]+\.md)(?:#([^)\s]+))?\)")
_SEMANTICS_SECTION = re.compile(r"semantics(?:\.md)? §(\d+(?:\.\d+)?)")


@cache
def tracked_text_files() -> tuple[Path, ...]:
    """Tracked files that hold text worth scanning (sources, docs, configuration)."""
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
    ).stdout.split("\0")
    paths = [ROOT / name for name in names if name and name != THIS]
    return tuple(
        p for p in paths if p.is_file() and (p.suffix in _TEXT_SUFFIXES or p.name in _TEXT_NAMES)
    )


def outside_references(text: str) -> list[int]:
    """Line numbers (1-based) of ``text`` that point at a document outside the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if _OUTSIDE.search(line):
            found.append(number)
    return found


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown text (lowercase, punctuation dropped)."""
    anchors = set()
    for line in markdown.splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            anchors.add(slug.replace(" ", "-"))
    return anchors


def _semantics_sections() -> set[str]:
    text = (ROOT / "docs" / "semantics.md").read_text(encoding="utf-8")
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, flags=re.MULTILINE))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _where(path: Path, number: int) -> str:
    return f"{path.relative_to(ROOT).as_posix()}:{number}"


def test_no_reference_to_documents_outside_the_repository() -> None:
    """No tracked file names the outside design notes (jev-semantics, celery-notes, ...)."""
    offenders = [
        _where(path, number)
        for path in tracked_text_files()
        for number in outside_references(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert offenders == [], "references to documents outside the repository:\n" + "\n".join(
        offenders
    )


def test_every_referenced_docs_page_exists() -> None:
    """Every ``docs/<name>.md`` named in a tracked file is a file of the repository."""
    missing = [
        f"{_where(path, number)}: docs/{name}"
        for path in tracked_text_files()
        for number, line in enumerate(_lines(path), start=1)
        for name in _DOC_PATH.findall(line)
        if not (ROOT / "docs" / name).is_file()
    ]
    assert missing == [], "references to missing docs pages:\n" + "\n".join(missing)


def test_markdown_links_reach_their_page_and_heading() -> None:
    """Links from README and docs/ to a docs page land on an existing file and heading."""
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for path in sources:
        for number, line in enumerate(_lines(path), start=1):
            for target, anchor in _MD_LINK.findall(line):
                page = (path.parent / target).resolve()
                if not page.is_file():
                    broken.append(f"{_where(path, number)}: {target}")
                elif anchor and anchor not in heading_anchors(page.read_text(encoding="utf-8")):
                    broken.append(f"{_where(path, number)}: {target}#{anchor}")
    assert broken == [], "broken documentation links:\n" + "\n".join(broken)


def test_cited_semantics_sections_exist() -> None:
    """Every ``semantics §N`` cited in a tracked file is a numbered section of docs/semantics.md."""
    sections = _semantics_sections()
    unknown = [
        f"{_where(path, number)}: §{section}"
        for path in tracked_text_files()
        for number, line in enumerate(_lines(path), start=1)
        for section in _SEMANTICS_SECTION.findall(line)
        if section not in sections
    ]
    assert unknown == [], "citations of sections docs/semantics.md does not have:\n" + "\n".join(
        unknown
    )


@pytest.mark.parametrize(
    "line",
    [
        "see jev-semantics §E.2",
        "(celery-notes §1.9)",
        "public names fixed by DESIGN.md",
        "trace-formats §2",
        "cf. ../shared/prior-art.md",
    ],
)
def test_a_planted_outside_reference_is_found(line: str) -> None:
    """The scanner flags each form of outside reference, on the line where it is."""
    assert outside_references(f"ok\n{line}\n") == [2]


@pytest.mark.parametrize(
    "line",
    ["docs/formats.md", "[formats.md](formats.md#issue-codes)", "plain text"],
)
def test_in_repository_references_are_not_flagged(line: str) -> None:
    """The in-repository formats page, linked or named by path, is not flagged."""
    assert outside_references(line) == []


def test_heading_anchors_follow_github() -> None:
    """Anchors drop punctuation and join words with hyphens, as GitHub renders them."""
    anchors = heading_anchors("## 1. The trace\n## Latest measurements (`bench/lanes.py`, x)\n")
    assert anchors == {"1-the-trace", "latest-measurements-benchlanespy-x"}
