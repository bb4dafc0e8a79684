"""deploy/Dockerfile agrees with the project and with the services that run the image (no
engine here to build it: these checks read the file)."""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import PurePosixPath

from tests.deploy.deploy_tree import DEPLOY, ROOT, bloomswarm_services, compose, compose_mounts

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOCKERFILE = DEPLOY / "Dockerfile"
IMAGE_USER = "10001"


def _copies() -> list[tuple[str, str]]:
    """(source, destination) of every COPY from the build context."""
    return re.findall(r"^COPY (?!--from)(\S+(?: \S+)*?) (\S+)$", DOCKERFILE.read_text(), re.M)


def _sources() -> set[str]:
    return {source.rstrip("/") for sources, _ in _copies() for source in sources.split()}


def test_the_image_copies_every_package_folder_and_build_file() -> None:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        project = tomllib.load(fh)
    folders = set(project["tool"]["setuptools"]["package-dir"].values())
    needed = folders | {"pyproject.toml", "setup.py", "README.md", "csrc"}
    assert needed <= _sources(), f"not copied into the image: {sorted(needed - _sources())}"
    for source in _sources():
        assert (ROOT / source).exists(), source


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves ``path`` out (the last matching pattern decides)."""
    ignored = False
    for line in patterns:
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        candidates = [path, *(str(p) for p in PurePosixPath(path).parents if str(p) != ".")]
        if any(fnmatch.fnmatch(c, pattern) or fnmatch.fnmatch(c, pattern.removeprefix("**/"))
               for c in candidates):
            ignored = not negate
    return ignored


def test_the_dockerignore_keeps_every_copied_source() -> None:
    patterns = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert _ignored(".venv/bin/python", patterns) and _ignored("tests/unit/x.py", patterns)
    for source in _sources():
        assert not _ignored(source, patterns), f"{source} is excluded from the build context"


def test_named_volumes_mount_on_directories_the_image_user_owns() -> None:
    text = DOCKERFILE.read_text()
    created: set[str] = set()
    for block in re.findall(r"install -d -o bloomswarm -g bloomswarm -m 0[0-7]{3}((?: \\\n?\s*|\s)[^&]*)",
                            text):
        created |= {p for p in block.replace("\\", " ").split() if p.startswith("/")}
    assert re.search(rf"^USER {IMAGE_USER}:{IMAGE_USER}$", text, re.M)
    assert f"--uid {IMAGE_USER}" in text
    document = compose()
    for name, service in bloomswarm_services(document).items():
        for target, (source, read_only) in compose_mounts(service).items():
            if not source.startswith(".") and not read_only:
                assert target in created, f"{name}: volume {source} on {target}, which the image lacks"
