"""Each command imports only what it uses: ``--help``, ``build``, ``inspect`` and ``query``
load no libtorrent, boto3 or prometheus_client (benchmarks/startup.py times them).

Every case runs in a fresh interpreter and reads ``sys.modules`` after the command ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("libtorrent", "boto3", "botocore", "prometheus_client")
"""The agent's and the bucket's dependencies: what the filter commands must not load."""

_PROBE = """
import json, sys
from bloomswarm.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # --help exits
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded_after(argv: list[str], cwd: Path) -> tuple[int, set[str]]:
    """Run ``bloomswarm ARGV`` in a new interpreter; (exit code, names in sys.modules)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMSWARM_")}
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=120, check=False)
    assert done.stdout, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    return int(result["code"]), set(result["modules"])


def _top_level(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with keys.txt and the filter f.bsf built from it."""
    from bloomswarm.common.builder import FilterBuilder

    root = tmp_path_factory.mktemp("startup")
    (root / "keys.txt").write_text("".join(f"key-{i}\n" for i in range(100)), encoding="utf-8")
    builder = FilterBuilder.for_capacity(100, 0.01)
    builder.add_many([f"key-{i}" for i in range(100)])
    builder.write(root / "f.bsf")
    return root


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["build", "keys.txt", "-o", "out.bsf"], ["inspect", "f.bsf"], ["query", "f.bsf", "key-1"],
     ["query", "--help"]],
    ids=["help", "build", "inspect", "query", "query-help"],
)
def test_filter_commands_load_no_agent_or_bucket_dependencies(argv: list[str], workdir: Path) -> None:
    code, modules = loaded_after(argv, workdir)
    assert code == 0
    assert "bloomswarm.main" in modules  # the probe ran the command
    assert not _top_level(modules) & set(HEAVY), sorted(_top_level(modules) & set(HEAVY))


def test_help_loads_no_numpy_and_no_command_backend(workdir: Path) -> None:
    code, modules = loaded_after(["--help"], workdir)
    assert code == 0
    assert "numpy" not in _top_level(modules)
    assert not {m for m in modules if m.startswith(("bloomswarm.publisher.", "bloomswarm.agent.daemon"))}


def test_the_probe_sees_heavy_modules_when_a_command_loads_them(workdir: Path) -> None:
    """The check can fail: a command that talks to a bucket does load botocore (boto3's
    core; the store makes its client without boto3's resource layer)."""
    code, modules = loaded_after(["versions", "--bucket", "filters", "--endpoint-url", "http://127.0.0.1:1"],
                                 workdir)
    assert code == 1
    assert "botocore" in _top_level(modules)


_AGENT_PROBE = """
import json, sys
import bloomswarm.agent.daemon, bloomswarm.agent.direct, bloomswarm.agent.filter_set
import bloomswarm.agent.size_routed_transfer, bloomswarm.agent.swarm, bloomswarm.agent_commands
from bloomswarm.common.s3_config import S3Config
from bloomswarm.common.s3_store import S3ObjectStore
store = S3ObjectStore(S3Config(bucket="filters", endpoint_url="http://127.0.0.1:1", region="us-east-1"))
store.presigned_get_url("latest.json", 60)
print(json.dumps(sorted(sys.modules)))
"""


def test_an_agent_without_certificates_loads_neither_x509_nor_boto3(tmp_path: Path) -> None:
    """What an idle agent holds in memory: its S3 client is botocore's (no boto3 resource
    layer, s3transfer or multiprocessing), and x509 is loaded only for private versions
    (about 3 and 1.3 MiB of an idle agent's USS, benchmarks/agent_cost.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BLOOMSWARM_", "AWS_"))}
    env |= {"AWS_ACCESS_KEY_ID": "probe", "AWS_SECRET_ACCESS_KEY": "probe",
            "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    done = subprocess.run([sys.executable, "-c", _AGENT_PROBE], cwd=tmp_path, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout.splitlines()[-1]))
    assert {"libtorrent", "botocore", "bloomswarm.agent.swarm"} <= modules | _top_level(modules)
    assert "boto3" not in _top_level(modules)
    assert not {m for m in modules if m.startswith("cryptography.x509")}
    assert "bloomswarm.common.tls_identity" not in modules
