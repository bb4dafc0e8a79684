"""The parser a command line gets: its own command in full, the others by name and help.

cli/commands.py names, for each command module, the commands it registers and their help
lines; main registers in full only the module of the command a command line names. These
tests hold the table and the modules to each other.
"""

from __future__ import annotations

import argparse
import importlib

import pytest

from bloomswarm.commands import COMMAND_MODULES, HELP, module_of
from bloomswarm.main import build_parser, command_word


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def _listing(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    """(command, help line) as ``--help`` lists them."""
    return [(choice.dest, choice.help) for choice in _subcommands(parser)._choices_actions]


def test_the_light_parser_lists_the_same_commands_and_help_as_the_full_one() -> None:
    full = build_parser()
    assert _listing(build_parser(full=[])) == _listing(full)
    for module in COMMAND_MODULES:
        assert _listing(build_parser(full=[module])) == _listing(full)


def test_each_module_registers_exactly_its_commands_with_the_table_help() -> None:
    for module, commands in COMMAND_MODULES.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"bloomswarm.{module}").register(sub)
        assert [(c.dest, c.help) for c in sub._choices_actions] == list(commands.items())
    assert set(HELP) == {name for commands in COMMAND_MODULES.values() for name in commands}


@pytest.mark.parametrize("command", sorted(HELP))
def test_the_named_command_gets_its_arguments(command: str) -> None:
    module = module_of(command)
    assert module is not None
    sub = _subcommands(build_parser(full=[module])).choices[command]
    assert sub.add_help  # a stub has no -h; a registered command has
    stub = _subcommands(build_parser(full=[])).choices[command]
    assert not stub.add_help and len(stub._actions) == 0


def test_global_options_take_no_values() -> None:
    """command_word assumes it: the first word that is not an option names the command."""
    parser = build_parser(full=[])
    for action in parser._actions:
        if action.option_strings:
            assert action.nargs == 0, action.option_strings


@pytest.mark.parametrize(
    ("argv", "word"),
    [([], None), (["--help"], None), (["-v", "--debug", "query", "f", "k"], "query"),
     (["agent", "run", "--data-dir", "d"], "agent"), (["--colour", "inspect", "f"], "inspect")],
)
def test_command_word(argv: list[str], word: str | None) -> None:
    assert command_word(argv) == word


def test_module_of_unknown_names() -> None:
    assert module_of("frobnicate") is None
    assert module_of("demo") is None  # always registered by main itself
