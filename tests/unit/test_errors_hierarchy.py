"""Every exception class of the package lives in common/errors.py and is drawn in its tree.

The modules are found by walking the packages pyproject.toml installs and importing each
one (``bloomswarm.__main__`` excepted: it runs the CLI), so a new module is checked as
soon as it exists.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from bloomswarm.common import errors

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]

PRIVATE_CONTROL_FLOW = {
    "bloomswarm.agent.direct._Stopped",
    "bloomswarm.publisher.source_text._LongLine",
    "bloomswarm.publisher.watch._PublishInterrupted",
}
"""Exceptions that never leave their module (see the errors module's docstring)."""


def package_modules() -> list[str]:
    """Every module of every package pyproject.toml installs."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages: list[str] = setuptools["packages"]
    names: list[str] = []
    for package in packages:
        module = importlib.import_module(package)
        names.append(package)
        names += [f"{package}.{info.name}" for info in pkgutil.iter_modules(module.__path__)
                  if not info.ispkg and info.name != "__main__"]
    return sorted(set(names))


def _classes(owner: ModuleType | type, module_name: str) -> Iterator[type]:
    """The classes defined in ``module_name`` reachable from ``owner``, nested ones too."""
    for value in vars(owner).values():
        if inspect.isclass(value) and value.__module__ == module_name and value is not owner:
            yield value
            yield from _classes(value, module_name)


def defined_exceptions() -> dict[str, type[BaseException]]:
    """Qualified name -> exception class, for every one the package's modules define."""
    found: dict[str, type[BaseException]] = {}
    for name in package_modules():
        module = importlib.import_module(name)
        for cls in _classes(module, name):
            if issubclass(cls, BaseException):
                found[f"{name}.{cls.__qualname__}"] = cls
    return found


def test_the_walk_finds_modules_of_every_package() -> None:
    modules = package_modules()
    assert {"bloomswarm.main", "bloomswarm.common.errors", "bloomswarm.agent.daemon",
            "bloomswarm.publisher.publish", "bloomswarm.sandbox.fleet"} <= set(modules)


def test_every_exception_class_is_defined_in_common_errors() -> None:
    exceptions = defined_exceptions()
    assert "bloomswarm.common.errors.CheckFailed" in exceptions  # the walk sees errors.py itself
    elsewhere = {name for name, cls in exceptions.items() if cls.__module__ != errors.__name__}
    assert elsewhere <= PRIVATE_CONTROL_FLOW, (
        f"exception classes outside common/errors.py: {sorted(elsewhere - PRIVATE_CONTROL_FLOW)}"
    )


def test_private_control_flow_exceptions_are_private_and_not_errors() -> None:
    exceptions = defined_exceptions()
    for name in PRIVATE_CONTROL_FLOW & exceptions.keys():
        cls = exceptions[name]
        assert cls.__name__.startswith("_")
        assert not issubclass(cls, errors.BloomswarmError)


def _errors_module_classes() -> list[type[BaseException]]:
    return [cls for cls in _classes(errors, errors.__name__) if issubclass(cls, BaseException)]


def _drawn_tree() -> dict[str, str | None]:
    """Class name -> the name drawn as its parent (None at the root), from the docstring.

    A class name at column 4 is the root; each level of the drawing indents it 5 more.
    """
    parents: list[str] = []
    drawn: dict[str, str | None] = {}
    for line in (errors.__doc__ or "").splitlines():
        words = line.replace("├──", " ").replace("└──", " ").replace("│", " ").split()
        if not words or not line.startswith("    ") or not isinstance(getattr(errors, words[0], None), type):
            continue
        name = words[0]
        depth, rest = divmod(line.index(name) - 4, 5)
        assert rest == 0 and depth <= len(parents), f"misaligned tree line: {line!r}"
        del parents[depth:]
        drawn[name] = parents[-1] if parents else None
        parents.append(name)
    return drawn


def test_every_error_derives_from_the_base_and_is_drawn_under_its_parent() -> None:
    classes = _errors_module_classes()
    drawn = _drawn_tree()
    assert set(drawn) == {cls.__name__ for cls in classes}, "the docstring tree and the classes differ"
    for cls in classes:
        assert issubclass(cls, errors.BloomswarmError), cls
        parent = drawn[cls.__name__]
        if parent is None:
            assert cls is errors.BloomswarmError
        else:
            assert cls.__bases__ == (getattr(errors, parent),), f"{cls.__name__} is not drawn under its base"
