"""deploy/docker-compose.yml agrees with the configurations its services load (no engine needed)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest

from bloomswarm.agent.config import AgentConfig
from bloomswarm.publisher.config import PublisherConfig
from tests.deploy.deploy_tree import (
    COMPOSE_FILE,
    DEPLOY,
    bloomswarm_invocations,
    bloomswarm_services,
    compose,
    compose_argv,
    compose_environment,
    compose_files,
    compose_mounts,
    load_invocation,
    load_yaml,
    shell_commands,
)

AGENTS = ("agent-1", "agent-2", "agent-3")
SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "deploy" / "compose-spec.json"


def _compose_validator() -> jsonschema.protocols.Validator:
    """The Compose Specification's schema (vendored, see tests/fixtures/deploy/README.md)
    with the top-level ``name`` it predates."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    schema["properties"]["name"] = {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$"}
    validator: jsonschema.protocols.Validator = jsonschema.Draft201909Validator(schema)
    return validator


def test_compose_file_follows_the_compose_specification() -> None:
    (raw,) = load_yaml(COMPOSE_FILE)
    errors = [f"{list(e.path)}: {e.message}" for e in _compose_validator().iter_errors(raw)]
    assert not errors, errors


def test_compose_schema_catches_a_misspelled_service_key() -> None:
    (raw,) = load_yaml(COMPOSE_FILE)
    broken = copy.deepcopy(raw)
    broken["services"]["agent-1"]["healtcheck"] = broken["services"]["agent-1"].pop("healthcheck")
    assert list(_compose_validator().iter_errors(broken))


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return compose()


def _configs(document: dict[str, Any]) -> dict[str, AgentConfig | PublisherConfig]:
    """Service name -> the configuration its bloomswarm command loads (real loaders)."""
    configs: dict[str, AgentConfig | PublisherConfig] = {}
    for name, service in bloomswarm_services(document).items():
        for argv in bloomswarm_invocations(compose_argv(service)):
            config = load_invocation(argv, compose_environment(service), compose_files(service))
            if config is not None:
                configs[name] = config
    return configs


def _under_mount(path: PurePosixPath, mounts: dict[str, tuple[str, bool]]) -> tuple[str, bool]:
    for target, source in mounts.items():
        if path == PurePosixPath(target) or PurePosixPath(target) in path.parents:
            return source
    raise AssertionError(f"{path} is on no volume")


def test_services_and_their_commands(document: dict[str, Any]) -> None:
    services = document["services"]
    expected = {"minio", "minio-init", "keygen", "sample-data", "publisher", "tracker",
                "tracker-sync", *AGENTS, "app"}
    assert set(services) == expected
    configs = _configs(document)
    assert set(configs) == {"publisher", "tracker-sync", *AGENTS}
    for name, service in bloomswarm_services(document).items():
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"], name
        for target, (source, _) in compose_mounts(service).items():
            if source.startswith("."):
                assert (DEPLOY / source).is_file(), f"{name}: {source} for {target} does not exist"
            else:
                assert source in document["volumes"], f"{name}: volume {source} is not declared"


def test_agents_share_nothing_but_the_network_and_the_trusted_key(document: dict[str, Any]) -> None:
    services = document["services"]
    configs = _configs(document)
    data_volumes = []
    for name in AGENTS:
        config = configs[name]
        assert isinstance(config, AgentConfig)
        mounts = compose_mounts(services[name])
        source, read_only = _under_mount(PurePosixPath(str(config.data_dir)), mounts)
        assert not read_only and source == f"{name}-data"
        data_volumes.append(source)
        for key in config.public_keys:
            assert _under_mount(PurePosixPath(str(key)), mounts) == ("trust", True)
        shared = {s for s, _ in mounts.values() if not s.startswith(".")} - {source}
        assert shared == {"trust"}, f"{name} mounts {shared}"
    assert len(set(data_volumes)) == len(AGENTS)


def test_app_reads_agent_1_directory_read_only(document: dict[str, Any]) -> None:
    app = document["services"]["app"]
    argv = app["entrypoint"] + app["command"]
    data_dir = argv[argv.index("--data-dir") + 1]
    agent = _configs(document)["agent-1"]
    assert isinstance(agent, AgentConfig)
    assert _under_mount(PurePosixPath(data_dir), compose_mounts(app)) == ("agent-1-data", True)
    assert PurePosixPath(data_dir) == PurePosixPath(str(agent.data_dir))
    assert argv[1] == "/opt/bloomswarm/app/lookup_app.py"
    assert "COPY deploy/app/lookup_app.py /opt/bloomswarm/app/lookup_app.py" in (
        DEPLOY / "Dockerfile").read_text()


def test_ports_endpoints_and_bucket_agree(document: dict[str, Any]) -> None:
    services = document["services"]
    configs = _configs(document)
    minio_command = services["minio"]["command"]
    minio_port = int(minio_command[minio_command.index("--address") + 1].lstrip(":"))
    init_script = services["minio-init"]["command"][0]
    buckets = set(re.findall(r"mc mb --ignore-existing local/([a-z0-9.-]+)", init_script))
    tracker_script = services["tracker"]["command"][0]
    (tracker_cmd,) = [c for c in shell_commands(tracker_script) if c[0] == "exec"]
    tracker_port = int(tracker_cmd[tracker_cmd.index("-p") + 1])
    assert tracker_port == int(tracker_cmd[tracker_cmd.index("-P") + 1])
    for name, config in configs.items():
        endpoint = urlsplit(config.s3.endpoint_url if config.s3 else "")
        assert (endpoint.hostname, endpoint.port) == ("minio", minio_port), name
        assert config.s3 is not None and config.s3.bucket in buckets, name
        trackers = config.swarm.trackers if isinstance(config, AgentConfig) else config.trackers
        for url in trackers:
            parts = urlsplit(url)
            assert (parts.hostname, parts.port) == ("tracker", tracker_port), f"{name}: {url}"
        if isinstance(config, AgentConfig):
            service = services[name]
            assert f"{config.status.port}" in service["expose"]
            assert f":{config.status.port}/healthz" in " ".join(service["healthcheck"]["test"])
            assert config.status.host == "0.0.0.0"
            listen_port = config.swarm.listen_interfaces.rsplit(":", 1)[1]
            assert {f"{listen_port}/tcp", f"{listen_port}/udp"} <= set(service["expose"])
            for node in config.swarm.dht_bootstrap_nodes:
                host, port = node.rsplit(":", 1)
                assert host in AGENTS and port == listen_port
            assert config.swarm.allow_private_origin, "MinIO's presigned URLs are private"
    prefixes = {c.s3.prefix for c in configs.values() if c.s3 is not None}
    assert len(prefixes) == 1, f"agents, publisher and tracker-sync must share one prefix: {prefixes}"


def test_keys_flow_from_keygen_to_publisher_and_agents(document: dict[str, Any]) -> None:
    services = document["services"]
    configs = _configs(document)
    (keygen,) = bloomswarm_invocations(compose_argv(services["keygen"]))
    private, public = PurePosixPath(keygen[1]), PurePosixPath(keygen[keygen.index("--public") + 1])
    keygen_mounts = compose_mounts(services["keygen"])
    publisher = configs["publisher"]
    assert isinstance(publisher, PublisherConfig) and publisher.signing_key is not None
    assert PurePosixPath(str(publisher.signing_key)) == private
    assert _under_mount(private, keygen_mounts)[0] == _under_mount(
        private, compose_mounts(services["publisher"]))[0] == "signing-key"
    trust = _under_mount(public, keygen_mounts)[0]
    for name in AGENTS:
        agent = configs[name]
        assert isinstance(agent, AgentConfig)
        assert [PurePosixPath(str(k)) for k in agent.public_keys] == [public]
    (sync,) = bloomswarm_invocations(compose_argv(services["tracker-sync"]))
    assert PurePosixPath(sync[sync.index("--public-key") + 1]) == public
    assert _under_mount(public, compose_mounts(services["tracker-sync"])) == (trust, True)
    assert publisher.work_dir is not None
    assert _under_mount(PurePosixPath(str(publisher.work_dir)),
                        compose_mounts(services["publisher"])) == ("publisher-work", False)


def test_tracker_sync_signals_the_tracker_it_shares_files_with(document: dict[str, Any]) -> None:
    services = document["services"]
    sync = _configs(document)["tracker-sync"]
    assert isinstance(sync, PublisherConfig)
    assert sync.tracker.whitelist is not None and sync.tracker.pid_file is not None
    assert services["tracker-sync"]["pid"] == "service:tracker"
    # tracker-sync starts once the tracker answers HTTP: an early SIGHUP breaks its reloads
    assert services["tracker-sync"]["depends_on"]["tracker"] == {"condition": "service_healthy"}
    assert "http://127.0.0.1:6969/" in " ".join(services["tracker"]["healthcheck"]["test"])
    script = services["tracker"]["command"][0]
    assert f"echo $$ > {sync.tracker.pid_file}" in script, "the shell's PID, then exec"
    (tracker_cmd,) = [c for c in shell_commands(script) if c[0] == "exec"]
    assert tracker_cmd[tracker_cmd.index("-w") + 1] == str(sync.tracker.whitelist)
    for path in (sync.tracker.whitelist, sync.tracker.pid_file):
        posix = PurePosixPath(str(path))
        assert _under_mount(posix, compose_mounts(services["tracker"])) == ("tracker-state", False)
        assert _under_mount(posix, compose_mounts(services["tracker-sync"])) == ("tracker-state", False)
