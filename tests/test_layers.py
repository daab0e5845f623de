"""The dependency rules of the source tree, checked on its import graph.

The graph is read from the source with :mod:`ast`: every ``import`` statement counts, function-local
and ``if TYPE_CHECKING:`` ones included (a cycle held apart at call time is still a cycle). An
import names the most specific module it reaches (``from worker import tasks`` is
``worker.tasks``; ``from producer import Producer`` is ``producer``). The rules:

1. no import cycle between modules (:data:`ALLOWED_CYCLES` is empty);
2. ``producer`` (the library an application embeds) imports from ``worker`` only the engine
   (``worker.evaluation``) and the canonical-JSON module (``worker.canonical_json``);
3. the engine, the judges and the store (``worker.evaluation``, ``worker.judges``,
   ``worker.store``) import no Celery, no kombu, not ``worker.settings``, not ``worker.broker``;
4. a private module (``_name``) is imported only from inside the package that holds it (its
   subpackages included: ``worker._models`` serves the engine, the judges and the store).

Each rule is shown failing on a tree with a planted violation (``tmp_path``), and the light
imports are checked at run time: importing the contract or the engine loads none of Celery,
kombu, redis, aiohttp or jsonschema (``call_valid`` loads it when it first validates).
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("producer", "worker")
ENGINE_FOR_PRODUCERS = frozenset({"worker.evaluation", "worker.canonical_json"})
"""The worker modules a producer may import: the public engine and the canonical JSON."""
PURE_LAYERS = ("worker.evaluation", "worker.judges", "worker.store")
"""Libraries that are given everything they need: no queue, no broker, no settings."""
PURE_FORBIDDEN = ("celery", "kombu", "worker.settings", "worker.broker")
HEAVY = ("celery", "kombu", "redis", "aiohttp", "jsonschema")
"""What importing the contract or the engine must not load."""

ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()
"""Import cycles tolerated, each the set of its modules with a comment saying why. Empty: none."""

# Modules exempt from rules 2 and 4 while a move is under way (none: the report, status, HTML
# and CLI moved to worker/reporting/ and worker/cli/). The test below fails on an entry that no
# longer excuses anything, so a stale one cannot stay.
TEMPORARY_EXEMPT: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


def source_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _base(module: str, path: Path, level: int) -> str:
    """The package a relative import of ``level`` dots starts from."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    parts = package.split(".")
    return ".".join(parts[: len(parts) - (level - 1)])


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, path: Path, known: Mapping[str, Path]
) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    origin = node.module or ""
    if node.level:
        origin = ".".join(p for p in (_base(module, path, node.level), origin) if p)
    for alias in node.names:
        submodule = f"{origin}.{alias.name}"
        yield submodule if submodule in known else origin


def imports(root: Path, packages: Iterable[str] = PACKAGES) -> list[Import]:
    """Every import of the source, function-local and ``TYPE_CHECKING`` ones included.

    One edge per (source, target), at its first line.
    """
    known = source_modules(root, packages)
    found: dict[tuple[str, str], Import] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        for node in sorted(nodes, key=lambda n: n.lineno):
            for target in _targets(node, module, path, known):
                found.setdefault((module, target), Import(module, target, node.lineno))
    return list(found.values())


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def cycles(edges: Iterable[Import]) -> list[frozenset[str]]:
    """The import cycles between modules of the source (strongly connected components)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
    graph = {m: {t for t in targets if t in graph} for m, targets in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1 or node in graph[node]:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def producer_into_worker(edges: Iterable[Import]) -> list[Import]:
    """Producer imports of worker modules other than the engine and the canonical JSON."""
    return [
        e
        for e in edges
        if _within(e.source, "producer")
        and _within(e.target, "worker")
        and e.target not in ENGINE_FOR_PRODUCERS
    ]


def impure_layers(edges: Iterable[Import]) -> list[Import]:
    """Engine, judges or store imports of Celery, kombu, the settings or the broker."""
    return [
        e
        for e in edges
        if any(_within(e.source, layer) for layer in PURE_LAYERS)
        and any(_within(e.target, banned) for banned in PURE_FORBIDDEN)
    ]


def _private_owner(target: str) -> str | None:
    """The package holding the first private module on ``target``'s path (None: all public)."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def private_imports(edges: Iterable[Import], packages: Iterable[str] = PACKAGES) -> list[Import]:
    """Imports of a private module from outside the package that holds it."""
    ours = tuple(packages)
    found = []
    for e in edges:
        owner = _private_owner(e.target)
        if e.target.split(".")[0] in ours and owner is not None and not _within(e.source, owner):
            found.append(e)
    return found


def _exempt(edges: Iterable[Import]) -> list[Import]:
    return [e for e in edges if e.source not in TEMPORARY_EXEMPT]


SOURCE = imports(ROOT)


def test_the_source_has_no_import_cycle() -> None:
    """No module of producer/ or worker/ reaches itself through imports (any kind of import)."""
    assert [sorted(c) for c in cycles(SOURCE) if c not in ALLOWED_CYCLES] == []


def test_producer_imports_only_the_engine_and_canonical_json_of_worker() -> None:
    """The embedded library depends on the worker only through its two public, light modules."""
    assert [str(e) for e in _exempt(producer_into_worker(SOURCE))] == []


def test_engine_judges_and_store_know_no_queue_broker_or_settings() -> None:
    """worker.evaluation, worker.judges and worker.store import no Celery/kombu/settings/broker."""
    assert [str(e) for e in impure_layers(SOURCE)] == []


def test_no_private_module_is_imported_from_another_package() -> None:
    """A ``_name`` module is imported only from inside the package that holds it."""
    assert [str(e) for e in _exempt(private_imports(SOURCE))] == []


def test_every_temporary_exemption_still_excuses_something() -> None:
    """An entry of TEMPORARY_EXEMPT that excuses no violation any more must be removed."""
    excused = {e.source for e in (*producer_into_worker(SOURCE), *private_imports(SOURCE))}
    assert sorted(TEMPORARY_EXEMPT - excused) == []


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``files`` (path -> text) under ``root``, with every package's ``__init__.py``."""
    for name, text in files.items():
        path = root / name
        for parent in path.relative_to(root).parents:
            if parent != Path():
                (root / parent).mkdir(parents=True, exist_ok=True)
                (root / parent / "__init__.py").touch()
        path.write_text(text, encoding="utf-8")
    return root


def test_a_cycle_through_local_and_type_checking_imports_is_found(tmp_path: Path) -> None:
    """A cycle held apart by a function-local import and a TYPE_CHECKING import is reported."""
    root = _tree(
        tmp_path,
        {
            "producer/a.py": "def f():\n    from producer.b import g\n",
            "producer/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
            ),
            "producer/c.py": "from producer import a\n",
        },
    )
    assert cycles(imports(root)) == [frozenset({"producer.a", "producer.b"})]


def test_a_package_importing_its_registry_back_is_a_cycle(tmp_path: Path) -> None:
    """``from . import Item`` in a module the package's ``__init__`` imports is reported."""
    root = _tree(
        tmp_path,
        {
            "producer/importers/__init__.py": "from . import otlp\nItem = 1\n",
            "producer/importers/otlp.py": "def split():\n    from . import Item\n",
        },
    )
    assert cycles(imports(root)) == [frozenset({"producer.importers", "producer.importers.otlp"})]


def test_a_producer_import_of_worker_internals_is_found(tmp_path: Path) -> None:
    """Producer -> worker.store is reported; the engine and the canonical JSON are not."""
    root = _tree(
        tmp_path,
        {
            "producer/report.py": (
                "from worker.evaluation import Trace\n"
                "from worker.canonical_json import thaw\n"
                "from worker.store import open_store\n"
                "from worker import app\n"
            ),
            "worker/evaluation/__init__.py": "",
            "worker/canonical_json.py": "",
            "worker/store/__init__.py": "",
            "worker/app.py": "",
        },
    )
    found = {e.target for e in producer_into_worker(imports(root))}
    assert found == {"worker.store", "worker.app"}


def test_queue_broker_or_settings_in_the_engine_judges_or_store_is_found(tmp_path: Path) -> None:
    """Celery in the engine, the settings in a judge, kombu and the broker in the store: all."""
    root = _tree(
        tmp_path,
        {
            "worker/evaluation/_run.py": "def go():\n    import celery\n",
            "worker/judges/_chat.py": "from worker.settings import Settings\n",
            "worker/store/_db.py": "from kombu import Queue\nfrom worker.broker import sweep\n",
            "worker/settings.py": "",
            "worker/broker/__init__.py": "",
            "worker/handling.py": "import celery\nfrom worker.settings import Settings\n",
        },
    )
    found = {(e.source, e.target) for e in impure_layers(imports(root))}
    assert found == {
        ("worker.evaluation._run", "celery"),
        ("worker.judges._chat", "worker.settings"),
        ("worker.store._db", "kombu"),
        ("worker.store._db", "worker.broker"),
    }


def test_a_private_module_of_another_package_is_found(tmp_path: Path) -> None:
    """worker -> producer._producer and settings -> judges._http are reported; own ones are not."""
    root = _tree(
        tmp_path,
        {
            "producer/_producer.py": "",
            "producer/__init__.py": "from ._producer import Producer\n",
            "producer/importers/_common.py": "",
            "producer/importers/otlp.py": "from ._common import Item\n",
            "worker/app.py": "from producer._producer import Producer\n",
            "worker/judges/_http.py": "",
            "worker/judges/_chat.py": "from worker.judges._http import check\n",
            "worker/settings.py": "from worker.judges import _http\n",
        },
    )
    found = {(e.source, e.target) for e in private_imports(imports(root))}
    assert found == {
        ("worker.app", "producer._producer"),
        ("worker.settings", "worker.judges._http"),
    }


def loaded_by(module: str) -> set[str]:
    """Top-level packages a fresh interpreter has loaded after ``import module``."""
    code = f"import json, sys\nimport {module}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return {name.partition(".")[0] for name in json.loads(done.stdout)}


@pytest.mark.parametrize(
    "module",
    ["producer.snapshot", "producer.topology", "worker.canonical_json", "worker.evaluation"],
)
def test_the_contract_and_the_engine_load_no_queue_or_http_client(module: str) -> None:
    """Importing the wire contract or the engine loads none of celery, kombu, redis, aiohttp."""
    assert sorted(loaded_by(module) & set(HEAVY)) == []


def test_the_load_check_sees_a_queue_client() -> None:
    """The same check reports Celery and kombu for the worker app, which does load them."""
    assert {"celery", "kombu"} <= loaded_by("worker.app") & set(HEAVY)


@pytest.mark.parametrize("package", ["producer", "worker.judges"])
def test_every_lazily_exported_name_resolves(package: str) -> None:
    """Each name in a lazy package's ``__all__`` imports, and unknown names raise AttributeError."""
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = module.no_such_name
