"""Without a C compiler the package still installs and works, on the pure-Python path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _copy_source_tree(target: Path) -> Path:
    """Copy the files git knows (tracked or not ignored): no build products of this checkout."""
    listing = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                             cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listing.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / name)
    return target


@pytest.mark.slow
def test_wheel_built_without_a_compiler_works(tmp_path: Path) -> None:
    env = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}
    env.pop("BLOOMSWARM_REQUIRE_EXTENSION", None)
    source = _copy_source_tree(tmp_path / "src")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("bloomswarm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert not [n for n in names if n.endswith(".so")]
        archive.extractall(tmp_path / "site")
    script = (
        "import sys\n"
        "# a developer's editable install would map bloomswarm.* back to this checkout\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]\n"
        "from bloomswarm.common.fastpath import EXTENSION\n"
        "from bloomswarm.common import Filter, FilterBuilder\n"
        "import bloomswarm, numpy as np\n"
        "assert EXTENSION is None, EXTENSION\n"
        "assert bloomswarm.__file__.startswith(sys.argv[1]), bloomswarm.__file__\n"
        "b = FilterBuilder.for_capacity(1000, 0.01)\n"
        "b.add_many(['a', b'b', 3]); b.add_many(np.arange(10, dtype=np.uint64))\n"
        "b.write(sys.argv[2])\n"
        "f = Filter.open(sys.argv[2])\n"
        "assert f.engine == 'python' and 'a' in f and b'b' in f and 3 in f\n"
        "assert f.contains_many(np.arange(10, dtype=np.uint64)).all()\n"
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "site"), str(tmp_path / "f.bsf")],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}, cwd=tmp_path, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
