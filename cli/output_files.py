"""The checks every command that writes a local file (``build``, ``diff``, ``patch``) makes
on its ``--output`` before it reads anything.

The file is written atomically (a temporary file renamed over the target), so a target
that is one of the command's own inputs would be replaced by its result, and a FIFO or a
device would be replaced by a regular file: both are refused, as an output whose folder
does not exist or that is a directory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from bloomswarm.common.errors import ConfigError


def check_output(output: Path, inputs: Iterable[str | Path] = ()) -> None:
    """ConfigError unless ``output`` may be written: its folder exists, it is not a
    directory or another file that is not a regular one (a FIFO, a device, a socket), and
    it is none of the local ``inputs`` (the same file by any name, or a file inside an
    input directory). An input with ``://`` (an S3 URL) is no local file."""
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
    path or by device and inode), or inside an input directory: the command would replace
    its own input, or a build would read a filter as keys next time."""
    target = output.resolve()
    for given in inputs:
        if "://" in str(given):
            continue
        source = Path(given).resolve()
        same = target == source
        if not same:
            try:
                same = os.path.samefile(output, given)
            except (OSError, ValueError):
                same = False  # no output yet, or an input that does not exist (its command says so)
        if same or (source.is_dir() and source in target.parents):
            raise ConfigError(f"the output {output} is among the inputs ({given}): write it elsewhere")
