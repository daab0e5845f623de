"""The readers and faces stay on their side: nothing below them imports them."""

from __future__ import annotations

from tests.test_layers import SOURCE


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def _into(source: str, target: str) -> list[str]:
    return [str(e) for e in SOURCE if _in(e.source, source) and _in(e.target, target)]


def test_reporting_imports_no_cli_and_only_the_cli_is_above_it() -> None:
    """reporting never imports the CLI, producer neither of them; nothing imports the CLI."""
    assert _into("worker.reporting", "worker.cli") == []
    assert _into("producer", "worker.cli") == []
    assert _into("producer", "worker.reporting") == []
    into_cli = [
        str(e) for e in SOURCE if _in(e.target, "worker.cli") and not _in(e.source, "worker.cli")
    ]
    assert into_cli == []
