"""The README's library example runs and prints what the README says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_readme_engine_example_prints_its_documented_output() -> None:
    """The python block in the README evaluates order 42 in one request and passes."""
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    code = block.group(1)
    expected = re.search(r"^# prints: (.+)$", code, re.M)
    assert expected is not None
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == expected.group(1).strip()
