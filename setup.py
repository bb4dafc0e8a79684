"""Build of the optional C extension ``bloomswarm.common._bloomfast`` (csrc/bloomfast.c, csrc/delta.c).

All other metadata is in pyproject.toml. The extension is optional: when it cannot be
built (no compiler, missing headers...) a one-line warning is printed and the install
goes on; the package then runs on its pure-Python path, with identical results.

Environment:
  BLOOMSWARM_NO_EXTENSION=1       do not build the extension at all;
  BLOOMSWARM_REQUIRE_EXTENSION=1  make a failed build an error (for CI).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from setuptools import Extension, setup  # type: ignore[import-untyped, unused-ignore]
from setuptools.command.build_ext import (  # type: ignore[import-untyped, unused-ignore]
    build_ext,
)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


class OptionalBuildExt(build_ext):  # type: ignore[misc, unused-ignore]
    """build_ext that turns a failed extension build into a warning."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            self._failed(exc)

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._failed(exc, ext.name)

    @staticmethod
    def _failed(exc: BaseException, name: str = "bloomswarm.common._bloomfast") -> None:
        if _env_flag("BLOOMSWARM_REQUIRE_EXTENSION"):
            raise exc
        detail = " ".join(str(exc).split())[:200]
        print(
            f"WARNING: could not build the optional C extension {name} ({detail}); "
            "bloomswarm will use its pure-Python path",
            file=sys.stderr,
        )


_COMPILE_ARGS = [] if sys.platform == "win32" else ["-O3"]

setup(
    ext_modules=[]
    if _env_flag("BLOOMSWARM_NO_EXTENSION")
    else [
        Extension(
            "bloomswarm.common._bloomfast",
            ["csrc/bloomfast.c", "csrc/delta.c"],
            extra_compile_args=_COMPILE_ARGS,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
