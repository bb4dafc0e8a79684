"""The checks every command that writes a local file (``build``, ``diff``, ``patch``) makes
on its ``--output`` before it reads anything.

The file is written atomically (a temporary file renamed over the target), so a target
that is one of the command's own inputs would be replaced by its result, and a FIFO or a
device would be replaced by a regular file: both are refused, as an output whose folder
does not exist or that is a directory.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from bloomswarm.common.errors import ConfigError


def check_output(output: Path, inputs: Iterable[str | Path] = ()) -> None:
    """ConfigError unless ``output`` may be written: its folder exists, it is not a
    directory or another file that is not a regular one (a FIFO, a device, a socket), and
    it is none of the local ``inputs`` (the same file by any name, a file inside an
    input directory, or a path a glob input matches, whether or not it exists yet). An
    input with ``://`` (an S3 URL) is no local file."""
    if not output.parent.is_dir():
        raise ConfigError(f"output directory does not exist: {output.parent}")
    try:
        mode: int | None = output.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None  # a dangling symbolic link too: the rename replaces the link
    except OSError as exc:
        raise ConfigError(f"cannot check the output {output}: {exc.strerror or exc}") from exc
    if mode is not None and stat.S_ISDIR(mode):
        raise ConfigError(f"output is a directory: {output} (give a file name)")
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigError(f"output is not a regular file: {output} (a FIFO, device or socket "
                          "would be replaced by a file; give a file name)")
    _refuse_output_among_inputs(output, inputs)


def _refuse_output_among_inputs(output: Path, inputs: Iterable[str | Path]) -> None:
    """ConfigError when the output file is one of the local inputs (the same file, by
    path or by device and inode), inside an input directory, or matched by a glob input:
    the command would replace its own input, or a build would read a filter as keys
    next time."""
    for given in inputs:
        if "://" not in str(given) and _is_among(output, given):
            raise ConfigError(f"the output {output} is among the inputs ({given}): write it elsewhere")


def _is_among(output: Path, given: str | Path) -> bool:
    """Whether the output is the input ``given``, inside it (a directory), or matched by
    it (a glob that is not an existing path: those are taken literally)."""
    target = output.resolve()
    source = Path(given).resolve()
    if target == source or (source.is_dir() and source in target.parents):
        return True
    try:
        if os.path.samefile(output, given):
            return True
    except (OSError, ValueError):
        pass  # no output yet, or an input that does not exist (its command says so)
    if os.path.lexists(given) or not glob.has_magic(str(given)):
        return False
    return any(glob_matches(str(given), path) for path in (os.path.abspath(output), str(target)))


def glob_matches(pattern: str, path: str) -> bool:
    """Whether the input glob ``pattern`` (relative to the working directory) would match
    the file ``path`` if it existed: ``fnmatch`` per path component, ``*`` and ``?`` do
    not match a leading dot, ``**`` is any number of non-hidden directories. Paths
    spelled through a symbolic link or ``..`` the pattern does not use are not matched."""
    if pattern.endswith("/"):
        return False  # "DIR/*/" matches directories only
    return _match_parts(os.path.abspath(pattern).split(os.sep), os.path.abspath(path).split(os.sep))


def _match_parts(pattern: Sequence[str], path: Sequence[str]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match_parts(rest, path[skip:]) for skip in range(len(path) + 1)
                   if not any(part.startswith(".") for part in path[:skip]))
    if not path:
        return False
    name = path[0]
    if name.startswith(".") and not head.startswith(".") and glob.has_magic(head):
        return False
    return fnmatch.fnmatchcase(name, head) and _match_parts(rest, path[1:])
