"""The repository is self-contained: no reference to documents outside it, no dangling doc link.

Every tracked text file is scanned (``git ls-files``). A reference that leaves the repository
fails with file:line, by rule rather than by a list of names: a ``<name>.md`` that is no tracked
page, an absolute path to a page, a ``../`` path that climbs out of the repository (or names
nothing), and a section citation ``<page> §N`` whose page is not one of ``docs/``. So does a
``docs/<name>.md`` that does not exist, a Markdown link to a missing heading, and a
``semantics §N`` section that ``docs/semantics.md`` does not have.
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

_PAGE_NAME = re.compile(r"(?<![\w.-])(/?(?:[\w.-]+/)*[\w-]+\.md)\b")
_CLIMB = re.compile(r"(?:\.\./)+[\w./-]*")
# A page cited by section: a file-like name (with a hyphen or ``.md``) right before the ``§``.
_CITED_PAGE = re.compile(r"([\w.]*[\w]-[\w.-]*|[\w-]+\.md) §")
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


@cache
def tracked_pages() -> frozenset[str]:
    """File names of the tracked Markdown pages (README.md, docs/*.md, ops/RUNBOOK.md, ...)."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "*.md"], cwd=ROOT, capture_output=True, check=True, text=True
    ).stdout.split("\0")
    return frozenset(Path(name).name for name in names if name)


def _leaves(line: str, where: Path) -> bool:
    """Whether ``line`` (of the file ``where``) points at a document outside the repository."""
    for page in _PAGE_NAME.findall(line):
        if page.startswith("/") or Path(page).name not in tracked_pages():
            return True
    for climb in _CLIMB.findall(line):
        target = (where.parent / climb).resolve()
        if not target.is_relative_to(ROOT) or not target.exists():
            return True
    doc_stems = {p.stem for p in (ROOT / "docs").glob("*.md")}
    return any(Path(cited).stem not in doc_stems for cited in _CITED_PAGE.findall(line))


def outside_references(text: str, where: Path = ROOT / "README.md") -> list[int]:
    """Line numbers (1-based) of ``text`` (the file ``where``) that point outside the repository."""
    return [n for n, line in enumerate(text.splitlines(), start=1) if _leaves(line, where)]


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
    """No tracked file points at a page, path or cited document outside the repository."""
    offenders = [
        _where(path, number)
        for path in tracked_text_files()
        for number in outside_references(path.read_text(encoding="utf-8", errors="replace"), path)
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
        "see design-notes §E.2",
        "(queue-notes.md §1.9)",
        "public names fixed by NOTES.md",
        "cf. ../elsewhere/guide.md",
        "read /srv/notes/guide.md first",
        "the fixtures in ../../../../elsewhere",
    ],
)
def test_a_planted_outside_reference_is_found(line: str) -> None:
    """The scanner flags each form of outside reference, on the line where it is."""
    assert outside_references(f"ok\n{line}\n") == [2]


@pytest.mark.parametrize(
    "line",
    [
        "docs/formats.md",
        "[formats.md](formats.md#issue-codes)",
        "see semantics §7.2 and the §8 counts",
        "ops/RUNBOOK.md",
        "plain text",
    ],
)
def test_in_repository_references_are_not_flagged(line: str) -> None:
    """In-repository pages, linked, named by path or cited by section, are not flagged."""
    assert outside_references(line) == []


def test_a_relative_path_inside_the_repository_is_not_flagged() -> None:
    """``../../ops/...`` from tests/deploy stays in the repository and names a file."""
    where = ROOT / "tests" / "deploy" / "alerts_test.yml"
    assert outside_references("  - ../../ops/prometheus/alerts.yml", where) == []


def test_heading_anchors_follow_github() -> None:
    """Anchors drop punctuation and join words with hyphens, as GitHub renders them."""
    anchors = heading_anchors("## 1. The trace\n## Latest measurements (`bench/lanes.py`, x)\n")
    assert anchors == {"1-the-trace", "latest-measurements-benchlanespy-x"}
