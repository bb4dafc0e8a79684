"""Copy the source folders into DEST laid out as they install (bloomswarm/, bloomswarm/common/, ...).

mypy reports no errors in installed packages (they live in site-packages), and the
folders here are mapped into ``bloomswarm.*`` by pyproject.toml's ``package-dir``, so
the type check runs ``mypy -p bloomswarm`` inside such a copy. The mapping is read from
pyproject.toml, so a new folder is checked as soon as it is packaged.

Usage: python scripts/package_tree.py DEST
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def main(dest: str) -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = config["package-dir"]
    for package in config["packages"]:
        source = ROOT / mapping[package]
        target = Path(dest, *package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for path in source.iterdir():
            if path.is_file() and (path.suffix in (".py", ".pyi") or path.name == "py.typed"):
                shutil.copy2(path, target / path.name)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python scripts/package_tree.py DEST", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
