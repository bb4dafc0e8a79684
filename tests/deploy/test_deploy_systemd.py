"""deploy/systemd: the units' commands and environment load the reference configurations
(installed as docs/operations.md says) through the real loaders, and agree with the
units' writable paths, credentials and time limits."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

from bloomswarm.agent.config import AgentConfig
from bloomswarm.publisher.config import PublisherConfig
from tests.deploy.deploy_tree import DEPLOY, SYSTEMD, bloomswarm_invocations, load_invocation

INSTALLED = {
    "/etc/bloomswarm/agent.toml": DEPLOY / "agent.toml",
    "/etc/bloomswarm/publisher.toml": DEPLOY / "publisher.toml",
}
"""Where docs/operations.md installs the reference configurations."""
CREDENTIALS = "/run/credentials/bloomswarm-publisher.service"


def _service(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read(SYSTEMD / name, encoding="utf-8")
    return parser["Service"]


def _environment(name: str) -> dict[str, str]:
    """The unit's Environment= assignments, specifiers expanded (%d: its credentials)."""
    env: dict[str, str] = {}
    for line in (SYSTEMD / name).read_text().splitlines():
        if line.startswith("Environment="):
            for assignment in shlex.split(line.removeprefix("Environment=")):
                key, value = assignment.split("=", 1)
                env[key] = value.replace("%d", CREDENTIALS)
    assert "%" not in "".join(env.values()), "an unexpanded specifier"
    return env


def _config(name: str) -> AgentConfig | PublisherConfig:
    (invocation,) = bloomswarm_invocations(shlex.split(_service(name)["ExecStart"]))
    config = load_invocation(invocation, _environment(name), INSTALLED)
    assert config is not None
    return config


def _seconds(text: str) -> float:
    units = {"s": 1, "min": 60, "m": 60, "h": 3600}
    match = re.fullmatch(r"(\d+)(s|min|m|h)", text)
    assert match, text
    return int(match.group(1)) * units[match.group(2)]


def test_agent_unit_writes_only_its_data_directory() -> None:
    config = _config("bloomswarm-agent.service")
    assert isinstance(config, AgentConfig)
    service = _service("bloomswarm-agent.service")
    data_dir = f"/var/lib/{service['StateDirectory']}"
    assert str(config.data_dir) == data_dir
    assert service["ReadWritePaths"] == data_dir
    assert service["StateDirectoryMode"] == "0755", "applications of other users read it"
    assert config.status.host == "127.0.0.1", "on a host the status endpoint stays on loopback"


def test_publisher_unit_signs_with_its_credential_and_works_in_its_cache() -> None:
    name = "bloomswarm-publisher.service"
    config = _config(name)
    assert isinstance(config, PublisherConfig)
    service = _service(name)
    credential, source = service["LoadCredential"].split(":", 1)
    assert str(config.signing_key) == f"{CREDENTIALS}/{credential}"
    assert source == "/etc/bloomswarm/publisher.key"
    work_dir = f"/var/cache/{service['CacheDirectory']}"
    assert str(config.work_dir) == work_dir == service["ReadWritePaths"]
    assert _seconds(service["TimeoutStartSec"]) < config.orphan_grace_s, (
        "retention would delete the upload of a publish still running"
    )
    assert service["User"] != _service("bloomswarm-agent.service")["User"], "the agent never sees the key"


def test_sysusers_creates_the_units_users() -> None:
    users = {line.split()[1] for line in (SYSTEMD / "bloomswarm.sysusers.conf").read_text().splitlines()
             if line.startswith("u ")}
    for name in ("bloomswarm-agent.service", "bloomswarm-publisher.service"):
        service = _service(name)
        assert service["User"] in users and service["Group"] == service["User"]
    assert Path(SYSTEMD / "bloomswarm-publisher.timer").is_file()


PRIVATE_SWARM_DROP_IN = SYSTEMD / "bloomswarm-agent.service.d" / "private-swarm.conf"
AGENT_CREDENTIALS = "/run/credentials/bloomswarm-agent.service"


def test_the_private_swarm_drop_in_hands_the_agent_one_certificate_pair(tmp_path: Path) -> None:
    """LoadCredential= copies tls.crt and tls.key into the unit's credentials directory (%d),
    which the drop-in names in swarm.certificate_dirs: a directory load_identities reads."""
    import datetime as dt

    from bloomswarm.agent import config as agent_config
    from bloomswarm.common.tls_identity import issue_certificate, load_identities, make_ca

    lines = PRIVATE_SWARM_DROP_IN.read_text(encoding="utf-8").splitlines()
    assert "[Service]" in lines
    credentials = dict(line.removeprefix("LoadCredential=").split(":", 1) for line in lines
                       if line.startswith("LoadCredential="))
    assert set(credentials) == {"tls.crt", "tls.key"}
    assert {Path(p).parent for p in credentials.values()} == {Path("/etc/bloomswarm/tls")}
    (assignment,) = [line.removeprefix("Environment=") for line in lines if line.startswith("Environment=")]
    variable, value = assignment.split("=", 1)
    assert variable == agent_config.env_name("swarm.certificate_dirs")
    assert value.replace("%d", AGENT_CREDENTIALS) == AGENT_CREDENTIALS
    # the credentials directory as systemd fills it
    now = dt.datetime.now(dt.timezone.utc)
    ca_pem, ca_key = make_ca("fleet", days=365, now=now)
    cert, key = issue_certificate(ca_pem, ca_key, name="host-1", days=30, now=now)
    for name, data in (("tls.crt", cert), ("tls.key", key)):
        (tmp_path / name).write_bytes(data)
        (tmp_path / name).chmod(0o400)
    (identity,) = load_identities([tmp_path], now=now)
    assert identity.issued_by(ca_pem)
