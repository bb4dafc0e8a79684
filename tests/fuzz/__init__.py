"""Bounded fuzzing in CI: the targets of sandbox/fuzz_targets.py under hypothesis, and
replays of the regression corpus (inputs that once broke a target)."""
