"""Every test says, in one line, the behavior it pins.

A test's docstring is the line a reader sees in a failure report and in ``pytest --collect-only``;
one that spills over several lines hides that line's claim in an essay. The why behind a test's
shape belongs in a brief comment in its body. Read with :mod:`ast` (no test module is imported),
and shown failing on a planted file.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def offenders(root: Path) -> Iterator[str]:
    """``path:line name`` of each ``test_*`` function under ``root`` without a one-line
    docstring."""
    for path in sorted(root.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if not node.name.startswith("test_"):
                continue
            text = ast.get_docstring(node, clean=False)
            if text is None or "\n" in text.strip():
                yield f"{path.relative_to(root)}:{node.lineno} {node.name}"


def test_every_test_has_a_one_line_docstring() -> None:
    """No test function under tests/ lacks a docstring or spreads it over several lines."""
    assert list(offenders(TESTS)) == []


def test_a_missing_or_multi_line_docstring_is_found(tmp_path: Path) -> None:
    """The check names a test without a docstring and one whose docstring spans two lines."""
    (tmp_path / "test_planted.py").write_text(
        'def test_fine():\n    """One line."""\n\n\n'
        "def test_bare():\n    pass\n\n\n"
        'async def test_long():\n    """First line,\n    and a second."""\n',
        encoding="utf-8",
    )
    assert list(offenders(tmp_path)) == [
        "test_planted.py:5 test_bare",
        "test_planted.py:9 test_long",
    ]
