"""deploy/: the Dockerfile and the Kubernetes manifests, checked without a container engine.

No Docker or Kubernetes runs on the project's machines, so these checks are structural:
the YAML parses into the expected objects, labels and selectors match, every probe and
Service port points at a declared container port, the Prometheus annotations name the
metrics port, the flags in the manifests and the Dockerfile are accepted by the real
argument parsers, and what the Dockerfile copies exists.
"""

from __future__ import annotations

import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from server_process import REPO_ROOT, SERVICE_PYTHON

DEPLOY = REPO_ROOT / "deploy"
SERVICE_HEALTH = "inference.GRPCInferenceService"


def _documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def _one(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in _documents() if d["kind"] == kind]
    return doc


def _containers() -> dict[str, dict[str, Any]]:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def _ports(container: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


def _flag(args: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    assert values, f"{name} not in {args}"
    return values[-1]


def _parses(module: str, args: list[str]) -> None:
    """The real parser (in the server environment) accepts these flags."""
    code = (
        f"import sys; from {module}.config import build_parser as b; b().parse_args(sys.argv[1:])"
        if module == "service"
        else f"import sys; from {module}.config import parse_args; parse_args(sys.argv[1:])"
    )
    done = subprocess.run(
        [SERVICE_PYTHON, "-c", code, *args], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def _in_image(path: str) -> Path:
    """A path inside the image (WORKDIR /app holds the sources) -> the repository's copy."""
    assert path.startswith("/app/"), path
    return REPO_ROOT / path.removeprefix("/app/")


def test_every_document_is_a_named_kubernetes_object() -> None:
    docs = _documents()
    assert {d["kind"] for d in docs} == {"Deployment", "Service"}
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"], doc
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (DEPLOY / "k8s" / resource).is_file(), resource


def test_selectors_match_the_pod_labels() -> None:
    deployment = _one("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert _one("Service")["spec"]["selector"].items() <= labels.items()


def test_service_ports_target_container_ports() -> None:
    declared = {n: p for c in _containers().values() for n, p in _ports(c).items()}
    for port in _one("Service")["spec"]["ports"]:
        target = port["targetPort"]
        assert target in declared or target in declared.values(), port
        assert declared.get(target, target) == port["port"]


def test_service_container_probes_and_flags() -> None:
    service = _containers()["service"]
    ports = _ports(service)
    args = service["args"]
    _parses("service", args)
    assert _in_image(_flag(args, "--model-repository")).is_dir()
    assert int(_flag(args, "--grpc-port")) == ports["grpc"] == 8001
    assert int(_flag(args, "--metrics-port")) == ports["metrics"] == 8002
    readiness, liveness = service["readinessProbe"]["grpc"], service["livenessProbe"]["grpc"]
    assert readiness == {"port": ports["grpc"], "service": SERVICE_HEALTH}
    assert liveness["port"] == ports["grpc"] and liveness.get("service", "") == ""
    assert service["startupProbe"]["grpc"]["port"] == ports["grpc"]
    grace = _one("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > float(_flag(args, "--exit-timeout-secs")), "the kubelet would kill the drain"


def test_gateway_sidecar_probes_and_flags() -> None:
    gateway = _containers()["gateway"]
    assert gateway["command"] == ["python", "-m", "gateway"]
    _parses("gateway", gateway["args"])
    target = _flag(gateway["args"], "--grpc-target")
    assert target == f"127.0.0.1:{_ports(_containers()['service'])['grpc']}"
    port = int(_flag(gateway["args"], "--http-port"))
    assert _ports(gateway)["http"] == port
    ready = gateway["readinessProbe"]["httpGet"]
    assert ready["path"] == "/v2/health/ready" and ready["port"] in ("http", port)
    assert gateway["livenessProbe"]["tcpSocket"]["port"] in ("http", port)


def test_prometheus_scrape_annotations() -> None:
    annotations = _one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == _ports(_containers()["service"])["metrics"]


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def test_dockerfile() -> None:
    steps = _instructions()
    assert steps[0][0] == "FROM" and steps[0][1].startswith("python:3.1")
    for word, rest in steps:
        if word == "COPY":
            *sources, _ = shlex.split(rest)
            for source in sources:
                assert (REPO_ROOT / source).exists(), source
    exposed = {int(p) for word, rest in steps if word == "EXPOSE" for p in rest.split()}
    assert exposed == {8000, 8001, 8002}
    (user,) = [rest for word, rest in steps if word == "USER"]
    assert user not in ("0", "root")
    entry = [yaml.safe_load(rest) for word, rest in steps if word == "ENTRYPOINT"][-1]
    cmd = [yaml.safe_load(rest) for word, rest in steps if word == "CMD"][-1]
    assert entry == ["python", "-m", "service"]
    _parses("service", cmd)
    assert _in_image(_flag(cmd, "--model-repository")).is_dir()


def test_dockerfile_requirements_come_from_pyproject() -> None:
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
    assert any(d.startswith("grpcio") for d in dependencies)
    runs = " ".join(rest for word, rest in _instructions() if word == "RUN")
    assert "['project']['dependencies']" in runs and "pip install -r" in runs


@pytest.mark.parametrize("excluded", [".venv", ".venv-client", "node_modules", ".git"])
def test_dockerignore_keeps_local_environments_out(excluded: str) -> None:
    lines = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert excluded in lines
