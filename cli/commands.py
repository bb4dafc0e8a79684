"""The subcommands of ``bloomswarm``: which module registers and runs each, and its help line.

:func:`bloomswarm.main.build_parser` registers in full only the module of the command a
command line names; the others appear by name and help line only, which is all that
``bloomswarm --help`` and argparse's list of choices need. So a command line imports no
other command's module (``query`` never loads the agent's configuration code), and each
module's :func:`register` takes its help lines from here, so the two cannot drift apart.
"""

from __future__ import annotations

COMMAND_MODULES: dict[str, dict[str, str]] = {
    "filter_commands": {
        "build": "build a filter file from keys, one per line",
        "inspect": "print a filter file's (or a delta file's) header and statistics",
        "query": "test keys against a filter file",
    },
    "delta_commands": {
        "diff": "write the delta from one filter version to the next (same parameters)",
        "patch": "apply a delta to the filter version it was made from",
    },
    "publish_commands": {
        "publish": "build the filter from the full data and publish it as the next version",
        "keygen": "write a new Ed25519 key pair for signing versions",
        "pin": "point the fleet at VERSION and hold it there",
        "unpin": "release a pin: point the fleet at the newest version",
        "refresh": "re-sign latest.json unchanged with a new issued_at (agents' watch.max_pointer_age_s)",
        "versions": "list the versions in the bucket",
        "tracker-sync": "write opentracker's whitelist from the versions in the bucket",
    },
    "index_commands": {
        "index": "sync or show index.json, the signed index of a bucket's named filters",
    },
    "agent_commands": {
        "agent": "the sidecar that fetches, verifies and swaps versions",
    },
    "cert_commands": {
        "certs": "make the fleet CA and agent certificates of private swarms, show a certificate",
    },
}
"""Module of ``bloomswarm`` -> {command: help line}, in the order ``--help`` lists them.
``demo`` is not here: its module imports nothing heavy, so it is always registered."""

HELP: dict[str, str] = {
    name: text for commands in COMMAND_MODULES.values() for name, text in commands.items()
}
"""Command -> its help line."""


def module_of(command: str) -> str | None:
    """The module that registers ``command``; None for a name no module here registers."""
    for module, commands in COMMAND_MODULES.items():
        if command in commands:
            return module
    return None
