"""The benchmarks' command lines: every bad argument is one argparse error (exit 2) before
any work starts, explicit options win over --quick/--smoke, SIGTERM unwinds, and
scripts/package_tree.py parses its arguments.

No benchmark runs here: the functions that would start work are replaced by ones that
raise :class:`WorkStarted`, so a missed check fails the test at once instead of running.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmarks import _common

ROOT = Path(__file__).resolve().parent.parent
REAL_MKDTEMP = tempfile.mkdtemp

# The first functions of each script that start work (fleets, servers, builds, files).
WORK: dict[str, tuple[str, ...]] = {
    "agent_cost": ("run",),
    "build": ("ensure_inputs", "publish_section"),
    "delta": ("run",),
    "fleet_model": ("calibrate",),
    "fuzz": ("run_target",),
    "lookup": ("run",),
    "many_filters": ("run_arm", "run_reference"),
    "origin_policy": ("write_random_file",),
    "private_swarm": ("run_rollout",),
    "small_versions": ("run",),
    "soak": ("Soak",),
    "startup": ("make_filter",),
    "swarm": ("run_fleet", "run_delta_mode", "build_versions"),
}


class WorkStarted(Exception):
    """Raised instead of starting a benchmark's work; carries what it was called with."""

    def __init__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__(name)
        self.args_ = args
        self.kwargs = kwargs


def _raiser(name: str) -> Callable[..., Any]:
    def start(*args: Any, **kwargs: Any) -> Any:
        raise WorkStarted(name, args, kwargs)
    return start


@pytest.fixture(autouse=True)
def no_work(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Replace every script's work functions (and tempfile.mkdtemp) by raisers; restore
    the SIGTERM/SIGHUP handlers the mains install."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for script, names in WORK.items():
        module = importlib.import_module(f"benchmarks.{script}")
        for name in names:
            monkeypatch.setattr(module, name, _raiser(f"{script}.{name}"))
    monkeypatch.setattr(tempfile, "mkdtemp", _raiser("tempfile.mkdtemp"))
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _main(script: str) -> Callable[[list[str]], int]:
    module = importlib.import_module(f"benchmarks.{script}")
    main: Callable[[list[str]], int] = module.main
    return main


def _expand(argv: list[str], tmp: Path) -> list[str]:
    (tmp / "afile").write_text("x\n")
    (tmp / "bad.json").write_text("{not json\n")
    (tmp / "list.json").write_text("[1, 2]\n")
    (tmp / "saved.json").write_text(json.dumps({"p2p": [], "direct": [], "failures": []}))
    places = {"{dir}": str(tmp), "{missing}": str(tmp / "nope" / "out.json"), "{file}": str(tmp / "afile"),
              "{bad}": str(tmp / "bad.json"), "{list}": str(tmp / "list.json"),
              "{saved}": str(tmp / "saved.json"), "{out}": str(tmp / "out.json"),
              "{proc}": "/proc/bloomswarm-test.json"}
    return [places.get(a, a) for a in argv]


OUTPUT_CASES = [
    (script, [*prefix, option, where])
    for script, prefix, options in [
        ("agent_cost", [], ["--json"]), ("build", [], ["--json"]), ("delta", [], ["--json"]),
        ("fleet_model", ["--quick"], ["--json"]), ("fuzz", [], ["--out"]), ("lookup", [], ["--json"]),
        ("many_filters", [], ["--json"]), ("origin_policy", [], ["--json"]),
        ("private_swarm", [], ["--json"]), ("small_versions", [], ["--json"]),
        ("soak", [], ["--json", "--markdown"]), ("startup", [], ["--json"]),
        ("swarm", [], ["--json", "--markdown"]),
    ]
    for option in options
    for where in ("{dir}", "{missing}", "{proc}")
]

NUMBER_CASES = [
    # finding 4: NaN and infinity
    ("small_versions", ["--size-mib", "nan"]), ("small_versions", ["--size-mib", "inf"]),
    ("many_filters", ["--size-kib", "nan"]), ("private_swarm", ["--upload-mib", "nan"]),
    ("agent_cost", ["--upload-cap-mib", "inf"]), ("swarm", ["--upload-mib", "nan"]),
    ("build", ["--publish-gib", "inf"]),
    # finding 5
    ("soak", ["--duration", "nan"]), ("soak", ["--duration", "inf"]), ("soak", ["--publish-interval", "inf"]),
    ("soak", ["--converge-timeout", "-5"]), ("soak", ["--sample-interval", "0"]), ("soak", ["--batch", "0"]),
    ("soak", ["--check-sample", "-1"]), ("soak", ["--agents", "1001"]),
    ("agent_cost", ["--window-s", "nan"]), ("agent_cost", ["--upload-cap-mib", "-1"]),
    ("agent_cost", ["--settle-s", "-5"]), ("agent_cost", ["--agents", "0"]),
    ("many_filters", ["--round-limit-s", "-1"]), ("many_filters", ["--round-limit-s", "nan"]),
    ("many_filters", ["--idle-s", "nan"]), ("many_filters", ["--size-kib", "1e-9"]),
    ("delta", ["--repeats", "0"]), ("delta", ["--repeats", "-1"]), ("delta", ["--keys", "0"]),
    ("delta", ["--keys", "-10"]), ("delta", ["--big-mib", "-5"]), ("delta", ["--behind", "2,4"]),
    ("fuzz", ["--runs", "-1"]), ("fuzz", ["--timeout", "0"]), ("fuzz", ["--timeout", "-1"]),
    ("fuzz", ["--targets", "nope"]), ("fuzz", ["--bogus"]),
    ("lookup", ["--repeats", "0"]), ("lookup", ["--processes", "-1"]), ("lookup", ["--big-gib", "-1"]),
    ("lookup", ["--keys", "-5"]), ("lookup", ["--fpp", "2"]), ("lookup", ["--fpp", "nan"]),
    ("swarm", ["--agents", "0"]), ("swarm", ["--agents", ""]), ("swarm", ["--sizes-mib", "-5"]),
    ("swarm", ["--upload-mib", "0"]), ("swarm", ["--upload-mib", "-1"]), ("swarm", ["--origin-mib", "-1"]),
    ("swarm", ["--delta-churn", "1"]), ("swarm", ["--swarm", "novalue"]),
    ("build", ["--files", "0"]), ("build", ["--keys", "-5"]), ("build", ["--fpp", "0"]),
    ("origin_policy", ["--agents", "0"]), ("origin_policy", ["--size-mib", "-1"]),
    ("origin_policy", ["--runs", "0"]), ("origin_policy", ["--discovery", "foo"]),
    ("origin_policy", ["--policies", "bar"]), ("origin_policy", ["--origin-connection-mib", "nan"]),
    ("fleet_model", ["--large-max-agents", "0"]), ("startup", ["--runs", "0"]),
    ("startup", ["--baseline", "{dir}"]),
    # finding 6: explicit values are validated under --quick/--smoke too
    ("private_swarm", ["--smoke", "--agents", "0"]), ("agent_cost", ["--smoke", "--agents", "0"]),
    ("build", ["--quick", "--files", "0"]), ("delta", ["--quick", "--repeats", "0"]),
    ("swarm", ["--quick", "--agents", "0"]),
    # findings 3 and 6: unreadable inputs, conflicting options
    ("agent_cost", ["--json", "{bad}"]), ("agent_cost", ["--json", "{list}"]),
    ("fuzz", ["--out", "{bad}"]), ("fuzz", ["--out", "{list}"]),
    ("swarm", ["--from-json", "{missing}"]), ("swarm", ["--from-json", "{dir}"]),
    ("swarm", ["--from-json", "{bad}"]), ("swarm", ["--from-json", "{list}"]),
    ("swarm", ["--from-json", "{saved}", "--json", "{out}"]),
    # finding 7: scratch folders that cannot be made
    ("delta", ["--work", "{file}"]), ("fuzz", ["--work", "/proc/nope"]), ("soak", ["--work-dir", "{file}"]),
    ("build", ["--cache-dir", "{file}"]), ("swarm", ["--plots", "{file}"]),
]


@pytest.mark.parametrize(("script", "argv"), OUTPUT_CASES + NUMBER_CASES,
                         ids=[f"{s}:{' '.join(a)}" for s, a in OUTPUT_CASES + NUMBER_CASES])
def test_a_bad_argument_is_one_usage_error_before_any_work(
        script: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _main(script)(_expand(argv, tmp_path))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


def test_output_paths_are_not_created_by_the_check(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    assert _common.output_path(str(target)) == target
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("script", sorted(WORK))
def test_every_main_installs_the_signal_handlers_first(script: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    with pytest.raises(SystemExit):
        _main(script)(["--no-such-option"])
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
    assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, signal.SIG_IGN)


def test_sigterm_raises_system_exit_143_once() -> None:
    _common.stop_on_signals()
    with pytest.raises(SystemExit) as exit_info:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs at once; never reached
    assert exit_info.value.code == 128 + signal.SIGTERM
    os.kill(os.getpid(), signal.SIGTERM)  # a second one, while cleaning up: ignored


def test_sigterm_unwinds_and_removes_the_temporary_directory(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys, tempfile, time
        sys.path.insert(0, sys.argv[1])
        from benchmarks._common import stop_on_signals
        stop_on_signals()
        with tempfile.TemporaryDirectory(dir=sys.argv[2]) as tmp:
            print(tmp, flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT), str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        made = Path(proc.stdout.readline().strip())
        assert made.is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not made.exists()


# -- finding 6: explicit options win over --quick / --smoke ------------------------------


def test_build_quick_keeps_explicit_values() -> None:
    from benchmarks.build import parse_args

    cfg, _ = parse_args(["--quick", "--keys", "300000", "--repeats", "2"])
    assert (cfg.keys, cfg.repeats, cfg.files) == (300_000, 2, 4)


def test_delta_quick_keeps_explicit_values() -> None:
    from benchmarks.delta import parse_args

    args = parse_args(["--quick", "--repeats", "5", "--big-mib", "0"])
    assert (args.repeats, args.big_mib, args.keys) == (5, 0, [200_000])


@pytest.fixture
def real_mkdtemp(monkeypatch: pytest.MonkeyPatch) -> None:
    """tempfile.mkdtemp back: these mains make their temporary directory before the work."""
    monkeypatch.setattr(tempfile, "mkdtemp", REAL_MKDTEMP)


@pytest.mark.usefixtures("real_mkdtemp")
def test_private_swarm_smoke_keeps_explicit_values() -> None:
    with pytest.raises(WorkStarted) as started:
        _main("private_swarm")(["--smoke", "--agents", "3"])
    assert started.value.kwargs["agents"] == 3 and started.value.kwargs["size"] == 4 * 1024 * 1024


@pytest.mark.usefixtures("real_mkdtemp")
def test_agent_cost_smoke_keeps_explicit_values() -> None:
    with pytest.raises(WorkStarted) as started:
        _main("agent_cost")(["--smoke", "--window-s", "7"])
    assert started.value.args_[:3] == (2, 7.0, 2)


@pytest.mark.usefixtures("real_mkdtemp")
def test_swarm_quick_keeps_explicit_values() -> None:
    with pytest.raises(WorkStarted) as started:
        _main("swarm")(["--quick", "--agents", "4", "--upload-mib", "2"])
    setup, _mode, agents = started.value.args_[:3]
    assert agents == 4 and setup.upload_cap == 2 * 1024 * 1024


# -- finding 8: scripts/package_tree.py --------------------------------------------------


def _package_tree() -> ModuleType:
    spec = importlib.util.spec_from_file_location("package_tree", ROOT / "scripts" / "package_tree.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_package_tree_help_prints_usage_and_copies_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        _package_tree().main(["--help"])
    assert exit_info.value.code == 0
    assert "DEST" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dest", ["afile", "afile/sub", "/proc/nope/tree", None])
def test_package_tree_bad_dest_is_one_usage_error(
        dest: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        _package_tree().main([] if dest is None else [dest])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len([ln for ln in err.splitlines() if "error:" in ln]) == 1


def test_package_tree_copies_into_dest(tmp_path: Path) -> None:
    assert _package_tree().main([str(tmp_path / "tree")]) == 0
    assert (tmp_path / "tree" / "bloomswarm" / "__init__.py").is_file()
