"""deploy/kubernetes/: every manifest valid against the Kubernetes schemas, and in step with
the daemon's config in the ConfigMap, read by the daemon's own loader.

``kubernetes-validate`` carries the schemas (offline).  What must agree is
what a typo would break silently in a cluster: the port (container, Service,
``[server] tcp``), the probes (paths and scheme), the secret (its name, its
keys, the files the config names), the mounts, and the grace of a stop.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from oma_bridge.server.config import AcpProfile, ServerConfig, parse_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
CONFIG_DIR = Path("/etc/oma-bridge")
K8S_VERSION = "1.30.0"


def manifests() -> dict[str, dict[str, Any]]:
    """Every resource of the recipe, by ``kind``."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            assert document["kind"] not in found, f"{path.name}: a second {document['kind']}"
            found[document["kind"]] = document
    return found


@pytest.fixture(scope="module")
def resources() -> dict[str, dict[str, Any]]:
    return manifests()


@pytest.fixture(scope="module")
def config(resources: dict[str, dict[str, Any]]) -> ServerConfig:
    text = resources["ConfigMap"]["data"]["config.toml"]
    return parse_config(text, source="configmap.yaml", base_dir=CONFIG_DIR)


def pod(resources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = resources["Deployment"]["spec"]["template"]["spec"]
    return spec


def container(resources: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    spec = pod(resources)
    [found] = [c for c in spec["containers"] + spec["initContainers"] if c["name"] == name]
    return found


def test_every_manifest_is_valid_against_the_kubernetes_schemas(
    resources: dict[str, dict[str, Any]],
) -> None:
    assert set(resources) == {"Namespace", "ConfigMap", "Deployment", "Service"}
    for resource in resources.values():
        kubernetes_validate.validate(resource, K8S_VERSION, strict=True)
        if resource["kind"] != "Namespace":
            assert resource["metadata"]["namespace"] == resources["Namespace"]["metadata"]["name"]


def test_a_broken_manifest_is_caught(resources: dict[str, dict[str, Any]]) -> None:
    broken = yaml.safe_load(yaml.safe_dump(resources["Service"]))
    broken["spec"]["ports"][0]["port"] = "seventy"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_ports_and_names_agree_with_the_config(
    resources: dict[str, dict[str, Any]], config: ServerConfig
) -> None:
    server = config.server
    assert server.tcp is not None and server.allow_remote
    daemon = container(resources, "oma-bridge")
    [port] = daemon["ports"]
    assert port["containerPort"] == server.tcp.port
    [service_port] = resources["Service"]["spec"]["ports"]
    # The daemon refuses a Host whose port is not the one it listens on.
    assert service_port["port"] == server.tcp.port
    assert service_port["targetPort"] == port["name"]
    selector = resources["Service"]["spec"]["selector"]
    labels = resources["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    name = resources["Service"]["metadata"]["name"]
    namespace = resources["Namespace"]["metadata"]["name"]
    for host in (name, f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"):
        assert host in server.allowed_hosts


def test_the_probes_are_the_daemon_s(
    resources: dict[str, dict[str, Any]], config: ServerConfig
) -> None:
    daemon = container(resources, "oma-bridge")
    scheme = "HTTPS" if config.server.tls_cert is not None else "HTTP"
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = daemon[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "wss", scheme)


def test_the_secret_reaches_the_files_the_config_names(
    resources: dict[str, dict[str, Any]], config: ServerConfig
) -> None:
    spec = pod(resources)
    volumes = {v["name"]: v for v in spec["volumes"]}
    secret = volumes["secrets"]["secret"]["secretName"]
    readme = (DEPLOY / "README.md").read_text()
    created = re.search(r"create secret generic (\S+) \\\s*\n\s*(.+)", readme)
    assert created is not None and created[1] == secret
    keys = set(re.findall(r"--from-file=([\w.]+)=", created[2]))
    # The init container copies each key to the private folder, 0600 ...
    copier = container(resources, "private-copies")
    command = copier["command"]
    assert command[:3] == ["install", "-m", "0600"]
    copied = {Path(p).name for p in command[3:-1]}
    assert copied == keys
    [private] = [m for m in copier["volumeMounts"] if m["name"] == "private"]
    assert command[-1].rstrip("/") == private["mountPath"]
    assert volumes["private"]["emptyDir"]["medium"] == "Memory"
    # ... where the daemon reads them, by the config's paths.
    daemon = container(resources, "oma-bridge")
    mounts = {m["name"]: m for m in daemon["volumeMounts"]}
    folder = Path(mounts["private"]["mountPath"])
    server = config.server
    named = [server.tls_cert, server.tls_key, server.token_file]
    assert {p.parent for p in named if p} == {folder}
    assert {p.name for p in named if p} == keys
    # The config file is the ConfigMap's, at the path the image's command reads.
    assert mounts["config"]["mountPath"] == str(CONFIG_DIR / "config.toml")
    assert volumes["config"]["configMap"]["name"] == resources["ConfigMap"]["metadata"]["name"]


def test_the_agents_run_in_the_shared_workspace(
    resources: dict[str, dict[str, Any]], config: ServerConfig
) -> None:
    mounts = {
        c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        for c in pod(resources)["containers"]
    }
    assert mounts["workspace"]["workspace"] == mounts["oma-bridge"]["workspace"]
    assert [str(root) for root in config.server.workspace_roots] == [
        mounts["oma-bridge"]["workspace"]
    ]
    acp = [p for p in config.agents.values() if isinstance(p, AcpProfile)]
    assert acp and all(p.url is None and p.command for p in acp)


def test_a_stop_gives_the_runs_their_grace(
    resources: dict[str, dict[str, Any]], config: ServerConfig
) -> None:
    daemon = container(resources, "oma-bridge")
    command = daemon["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:3] == ["oma-bridge", "status", "--wait-idle"]
    wait_s = float(command[3])
    grace = pod(resources)["terminationGracePeriodSeconds"]
    # The kubelet counts the preStop hook in the grace; the daemon then needs
    # stop_grace_s + 2 s (PROTOCOL §11.36) after SIGTERM.
    assert grace > wait_s + config.server.stop_grace_s + 2
    assert resources["Deployment"]["spec"]["replicas"] == 1
    assert resources["Deployment"]["spec"]["strategy"]["type"] == "Recreate"
