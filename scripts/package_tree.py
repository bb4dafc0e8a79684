"""Copy the source folders into DEST laid out as they install (bloomswarm/, bloomswarm/common/, ...).

mypy reports no errors in installed packages (they live in site-packages), and the
folders here are mapped into ``bloomswarm.*`` by pyproject.toml's ``package-dir``, so
the type check runs ``mypy -p bloomswarm`` inside such a copy. The mapping is read from
pyproject.toml, so a new folder is checked as soon as it is packaged.

Usage: python scripts/package_tree.py DEST
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def copy_tree(dest: str) -> None:
    """Copy the packaged source folders into ``dest`` (see the module docstring)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = config["package-dir"]
    for package in config["packages"]:
        source = ROOT / mapping[package]
        target = Path(dest, *package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for path in source.iterdir():
            if path.is_file() and (path.suffix in (".py", ".pyi") or path.name == "py.typed"):
                shutil.copy2(path, target / path.name)


def main(argv: list[str] | None = None) -> int:
    """Parse DEST, copy the tree there; a DEST that cannot be made is one line, exit 2."""
    parser = argparse.ArgumentParser(
        prog="scripts/package_tree.py",
        description="Copy the source folders into DEST laid out as they install (for mypy).")
    parser.add_argument("dest", metavar="DEST", help="folder to fill (made when missing)")
    args = parser.parse_args(argv)
    dest = Path(args.dest)
    if dest.exists() and not dest.is_dir():
        parser.error(f"DEST {args.dest!r} exists and is not a directory")
    try:
        copy_tree(args.dest)
    except OSError as exc:
        parser.error(f"cannot copy into DEST {args.dest!r}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
