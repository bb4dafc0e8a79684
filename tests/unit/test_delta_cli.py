"""``bloomswarm diff``, ``patch`` and ``inspect`` of a delta, end to end.

In-process through ``bloomswarm.main.main``; one subprocess per command checks that they
load no libtorrent, boto3 or prometheus_client (the start-up rule of cli/main.py). The
refusals, one stderr line each, are rows of docs/bad-input.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.params import FilterParams, Layout
from bloomswarm.main import main

HEAVY = {"libtorrent", "boto3", "botocore", "prometheus_client"}
PARAMS = FilterParams(Layout.BLOCKED, 512 * 64, 7, hash_seed=5)


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """v1.bsf and v2.bsf: two versions of one filter's parameters; the working directory."""
    monkeypatch.chdir(tmp_path)
    builder = FilterBuilder(PARAMS, capacity=3000, target_fpp=0.01)
    builder.add_many([f"key-{i}" for i in range(3000)])
    builder.write(tmp_path / "v1.bsf", version=1, created_at=1_700_000_000)
    builder = FilterBuilder(PARAMS, capacity=3000, target_fpp=0.01)
    builder.add_many([f"key-{i}" for i in range(30, 3030)])
    builder.write(tmp_path / "v2.bsf", version=2, created_at=1_700_003_600)
    return tmp_path


def test_diff_then_patch_reproduces_the_new_version(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["diff", "v1.bsf", "v2.bsf", "-o", "d.bsd"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("wrote d.bsd: v1 -> v2, ")
    assert "bits flipped" in out and "of the target file" in out
    code, out, err = run(["patch", "v1.bsf", "d.bsd", "-o", "new.bsf"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("wrote new.bsf: v2 from v1, ")
    assert (folder / "new.bsf").read_bytes() == (folder / "v2.bsf").read_bytes()


def test_patch_with_the_expected_sha256(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import hashlib

    run(["diff", "v1.bsf", "v2.bsf", "-o", "d.bsd"], capsys)
    digest = hashlib.sha256((folder / "v2.bsf").read_bytes()).hexdigest()
    code, _, err = run(["patch", "v1.bsf", "d.bsd", "-o", "new.bsf",
                        "--expected-sha256", digest], capsys)
    assert (code, err) == (0, "")


def test_a_refused_patch_writes_nothing(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(["diff", "v1.bsf", "v2.bsf", "-o", "d.bsd"], capsys)
    before = sorted(os.listdir(folder))
    code, out, err = run(["patch", "v2.bsf", "d.bsd", "-o", "new.bsf"], capsys)
    assert code == 1 and out == ""
    assert err.startswith("bloomswarm patch: error: wrong base:") and len(err.splitlines()) == 1
    assert sorted(os.listdir(folder)) == before


@pytest.mark.parametrize("verify", [False, True])
def test_inspect_reads_a_delta_header(folder: Path, capsys: pytest.CaptureFixture[str], verify: bool) -> None:
    run(["diff", "v1.bsf", "v2.bsf", "-o", "d.bsd"], capsys)
    code, out, err = run(["inspect", "--json", "d.bsd", *(["--verify"] if verify else [])], capsys)
    assert (code, err) == (0, "")
    info = json.loads(out)
    assert info["kind"] == "delta"
    assert (info["base_version"], info["target_version"]) == (1, 2)
    assert info["file_size"] == (folder / "d.bsd").stat().st_size
    params = (info["layout"], info["num_bits"], info["num_probes"], info["hash_seed"])
    assert params == ("blocked", 512 * 64, 7, 5)
    assert info["flips"] > 0 and 0 < info["share_of_target"] < 1
    assert info.get("verified", False) is verify
    code, out, _ = run(["inspect", "d.bsd"], capsys)
    assert code == 0 and "target_sha256" in out


_PROBE = """
import json, sys
from bloomswarm.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


@pytest.mark.parametrize("command", ["diff", "patch", "inspect"])
def test_delta_commands_load_no_agent_or_bucket_dependencies(folder: Path, command: str) -> None:
    main(["diff", "v1.bsf", "v2.bsf", "-o", "d.bsd"])
    argv = {"diff": ["diff", "v1.bsf", "v2.bsf", "-o", "d2.bsd"],
            "patch": ["patch", "v1.bsf", "d.bsd", "-o", "new.bsf"],
            "inspect": ["inspect", "d.bsd"]}[command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMSWARM_")}
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=folder, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=120, check=False)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 0, done.stderr
    loaded = {name.split(".")[0] for name in result["modules"]}
    assert "bloomswarm" in loaded and not loaded & HEAVY, sorted(loaded & HEAVY)
