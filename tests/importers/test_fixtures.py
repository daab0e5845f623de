"""The committed importer fixtures are the generator's output, each one marked as generated."""

from __future__ import annotations

import re
from pathlib import Path

from tests.importers.conftest import GENERATED, TRACES

GENERATOR = TRACES.parent / "generate.py"


def test_every_fixture_is_marked_generated_and_written_by_the_generator() -> None:
    """No hand-written fixture: each file is listed in GENERATED and written by generate.py."""
    files = sorted(p.name for p in Path(TRACES).glob("*.jsonl"))
    assert files == sorted(GENERATED)
    written = set(re.findall(r'write_jsonl\(\s*"([a-z_]+\.jsonl)"', GENERATOR.read_text()))
    assert written == set(GENERATED)


def test_fixtures_stay_small() -> None:
    """Fixtures are read by many tests and reviewed by hand: each stays under 64 KB."""
    sizes = {p.name: p.stat().st_size for p in Path(TRACES).glob("*.jsonl")}
    assert all(size < 64_000 for size in sizes.values()), sizes
