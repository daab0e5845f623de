"""The exception tree drawn in ``producer``'s docstring matches the classes the package defines."""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil

import producer


def _public_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class a producer module defines under a public name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(producer.__path__, "producer."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[name] = value
    return found


def _drawn() -> dict[str, str]:
    """Each class drawn in the tree, by the root it is drawn under."""
    doc = producer.__doc__ or ""
    tree = doc[doc.index("Exception tree") :]
    drawn: dict[str, str] = {}
    root = ""
    for line in tree.splitlines():
        if line.startswith("    ") and line[4:5].isalpha():
            root = line.split()[0]
        elif "── " in line:
            drawn[line.split("── ")[1].split()[0]] = root
    return drawn


def test_every_public_exception_is_drawn_under_its_base() -> None:
    """Each public exception is drawn under the builtin it derives from; nothing else is drawn."""
    # The roots: ValueError means permanent, RuntimeError transient.
    defined = _public_exceptions()
    drawn = _drawn()
    assert sorted(drawn) == sorted(defined)
    for name, root in drawn.items():
        assert issubclass(defined[name], getattr(builtins, root)), name
