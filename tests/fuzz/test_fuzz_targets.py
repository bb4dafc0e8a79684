"""Bounded fuzzing of every target in sandbox/fuzz_targets.py, plus the regression corpus.

Contract under test: every input is accepted or rejected with the project's own error
type (the target returns a bool); anything else escapes the target and fails the test.
The long coverage-guided runs are benchmarks/fuzz.py (atheris), outside CI; this is the
same code for a bounded number of hypothesis examples: random bytes, and valid inputs
(made by the project's own builder and publisher) with bytes flipped, cut or spliced.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomswarm.sandbox import fuzz_targets

CORPUS = Path(__file__).resolve().parent / "corpus"
EXAMPLES = 250
"""Hypothesis examples per target and strategy in CI."""


@cache
def _seeds() -> dict[str, list[bytes]]:
    return fuzz_targets.seeds()


@st.composite
def _mutated(draw: st.DrawFn, target: str) -> bytes:
    """A valid seed of ``target`` with a few bytes changed, then maybe cut or extended."""
    data = bytearray(draw(st.sampled_from(_seeds()[target])))
    for _ in range(draw(st.integers(0, 6))):
        if len(data) > 1:
            data[draw(st.integers(1, len(data) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    if draw(st.booleans()):
        data += draw(st.binary(max_size=64))
    return bytes(data)


def _check(target: Callable[[bytes], bool], data: bytes) -> None:
    assert target(data) in (True, False)


@pytest.mark.parametrize("name", sorted(fuzz_targets.TARGETS))
def test_every_seed_is_accepted(name: str) -> None:
    """The seeds reach the accepting path (so the fuzzing below is not all rejections)."""
    target = fuzz_targets.TARGETS[name]
    assert [target(seed) for seed in _seeds()[name]] == [True] * len(_seeds()[name])


@pytest.mark.parametrize("name", sorted(fuzz_targets.TARGETS))
def test_random_bytes_keep_the_contract(name: str) -> None:
    target = fuzz_targets.TARGETS[name]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.binary(max_size=512))
    def run(data: bytes) -> None:
        _check(target, data)

    run()


@pytest.mark.parametrize("name", sorted(fuzz_targets.TARGETS))
def test_mutated_valid_inputs_keep_the_contract(name: str) -> None:
    target = fuzz_targets.TARGETS[name]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_mutated(name))
    def run(data: bytes) -> None:
        _check(target, data)

    run()


def _corpus() -> list[tuple[str, Path]]:
    return sorted(
        (folder.name, path)
        for folder in CORPUS.iterdir() if folder.is_dir()
        for path in folder.iterdir() if path.suffix == ".bin"
    )


def test_corpus_folders_name_targets() -> None:
    folders = {folder.name for folder in CORPUS.iterdir() if folder.is_dir()}
    assert folders <= set(fuzz_targets.TARGETS)
    assert _corpus(), "the regression corpus is empty"


@pytest.mark.parametrize(("name", "path"), _corpus(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_regression_corpus_keeps_the_contract(name: str, path: Path) -> None:
    """Every input that once broke a target is now accepted or rejected properly."""
    _check(fuzz_targets.TARGETS[name], path.read_bytes())
