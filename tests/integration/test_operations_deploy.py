"""deploy/: the Dockerfile and the Kubernetes manifests, checked without a container engine.

No Docker or Kubernetes runs on the project's machines, so these checks are structural:
the YAML parses into the expected objects, which also pass the Kubernetes schemas
(kubernetes-validate; `kubectl kustomize` builds them where kubectl is installed), labels
and selectors match, every probe and Service port points at a declared container port,
the stop sequence (preStop, drain, grace period) fits, the autoscaler's metrics come from
the adapter rules and those from series the server exports, the balancer's nginx.conf is
the rendered template, the Prometheus annotations name the metrics port, the flags in the
manifests and the Dockerfile are accepted by the real argument parsers, and what the
Dockerfile copies exists.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from integration_support import add_sub_inputs
from operations_support import http_get, metrics_port
from replica_cluster import find_nginx, nginx_missing
from server_process import REPO_ROOT, SERVICE_PYTHON, ServerProcess

DEPLOY = REPO_ROOT / "deploy"
K8S = DEPLOY / "k8s"
SERVICE_HEALTH = "inference.GRPCInferenceService"
SERVER = "triton-compatible-server"
#: How deploy/k8s/balancer/nginx.conf is rendered (deploy/k8s/kustomization.yaml).
BALANCER_HOST = "triton-compatible-server-replicas.default.svc.cluster.local"
BALANCER_RENDER = [
    "--container",
    "--resolve",
    "--resolver",
    "kube-dns.kube-system.svc.cluster.local",
    "--grpc-server",
    f"{BALANCER_HOST}:8001",
    "--http-server",
    f"{BALANCER_HOST}:8000",
]


def _kustomization() -> dict[str, Any]:
    return dict(yaml.safe_load((K8S / "kustomization.yaml").read_text()))


def _documents() -> list[dict[str, Any]]:
    """Every object kustomization.yaml applies (the generated ConfigMap aside)."""
    docs = []
    for resource in _kustomization()["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / resource).read_text()) if d is not None]
    return docs


def _one(kind: str, name: str = SERVER) -> dict[str, Any]:
    (doc,) = [d for d in _documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _pod(deployment: str = SERVER) -> dict[str, Any]:
    return dict(_one("Deployment", deployment)["spec"]["template"]["spec"])


def _containers(deployment: str = SERVER) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _pod(deployment)["containers"]}


def _ports(container: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


def _flag(args: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    assert values, f"{name} not in {args}"
    return values[-1]


def _cores(quantity: str) -> float:
    """A Kubernetes CPU quantity ("2", "500m") in cores."""
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _args(name: str) -> list[str]:
    """The container's args as the kubelet passes them: each $(VAR) replaced by the
    container's env value, a downward-API CPU value being the named resource of the
    container, in whole divisors rounded up (as the kubelet rounds it)."""
    containers = _containers()
    container = containers[name]
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        ref = var["valueFrom"]["resourceFieldRef"]
        owner = containers[ref.get("containerName", name)]
        kind, resource = ref["resource"].split(".")
        assert resource == "cpu", ref
        amount = _cores(owner["resources"][kind][resource])
        env[var["name"]] = str(math.ceil(amount / _cores(str(ref.get("divisor", "1")))))
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in container["args"]]


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


def _selected(selector: dict[str, str]) -> list[str]:
    """The Deployments whose pods carry every label of ``selector``."""
    return [
        d["metadata"]["name"]
        for d in _documents()
        if d["kind"] == "Deployment"
        and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ]


def test_every_document_is_a_named_kubernetes_object() -> None:
    docs = _documents()
    kinds = {d["kind"] for d in docs}
    assert kinds == {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"}
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"], doc
    for generator in _kustomization()["configMapGenerator"]:
        for file in generator["files"]:
            assert (K8S / file).is_file(), file


def test_selectors_match_the_pod_labels() -> None:
    for deployment in (d for d in _documents() if d["kind"] == "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for doc in _documents():
        if doc["kind"] == "Service":
            assert len(_selected(doc["spec"]["selector"])) == 1, doc["metadata"]["name"]
        if doc["kind"] == "PodDisruptionBudget":
            assert len(_selected(doc["spec"]["selector"]["matchLabels"])) == 1, doc


def test_service_ports_target_container_ports() -> None:
    for service in (d for d in _documents() if d["kind"] == "Service"):
        (deployment,) = _selected(service["spec"]["selector"])
        declared = {n: p for c in _containers(deployment).values() for n, p in _ports(c).items()}
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            assert target in declared or target in declared.values(), port
            assert declared.get(target, target) == port["port"]


def test_service_container_probes_and_flags() -> None:
    service = _containers()["service"]
    ports = _ports(service)
    args = _args("service")
    _parses("service", args)
    assert _in_image(_flag(args, "--model-repository")).is_dir()
    assert int(_flag(args, "--grpc-port")) == ports["grpc"] == 8001
    assert int(_flag(args, "--metrics-port")) == ports["metrics"] == 8002
    assert service["readinessProbe"]["grpc"] == {"port": ports["grpc"], "service": SERVICE_HEALTH}
    # Check answers readiness for every service name (as Triton's): liveness is the port.
    assert service["livenessProbe"]["tcpSocket"]["port"] in ("grpc", ports["grpc"])
    assert service["startupProbe"]["grpc"]["port"] == ports["grpc"]


def test_gateway_sidecar_probes_and_flags() -> None:
    gateway = _containers()["gateway"]
    assert gateway["command"] == ["python", "-m", "gateway"]
    _parses("gateway", _args("gateway"))
    target = _flag(gateway["args"], "--grpc-target")
    assert target == f"127.0.0.1:{_ports(_containers()['service'])['grpc']}"
    port = int(_flag(gateway["args"], "--http-port"))
    assert _ports(gateway)["http"] == port
    ready = gateway["readinessProbe"]["httpGet"]
    assert ready["path"] == "/v2/health/ready" and ready["port"] in ("http", port)
    assert gateway["livenessProbe"]["tcpSocket"]["port"] in ("http", port)


def test_frontends_follow_the_cpu_request() -> None:
    """Without --frontends the service starts one frontend per core it may use: with no
    CPU limit, every core of the node. The manifest sizes them from the CPU request."""
    resources = _containers()["service"]["resources"]
    frontends = int(_flag(_args("service"), "--frontends"))
    assert frontends == math.ceil(_cores(resources["requests"]["cpu"])) >= 1
    if "cpu" in resources.get("limits", {}):
        assert frontends <= math.ceil(_cores(resources["limits"]["cpu"]))


def test_the_gateway_calls_the_service_over_its_local_socket() -> None:
    """Both containers name one --grpc-local-socket, in a folder mounted from the same
    emptyDir volume in both (a volume no other pod sees)."""
    containers = _containers()
    path = _flag(_args("service"), "--grpc-local-socket")
    assert _flag(_args("gateway"), "--grpc-local-socket") == path
    folder = str(Path(path).parent)
    volumes = set()
    for container in containers.values():
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == folder]
        volumes.add(mount["name"])
    (volume,) = volumes
    (spec,) = [v for v in _pod()["volumes"] if v["name"] == volume]
    assert "emptyDir" in spec


def _pre_stop_seconds(container: dict[str, Any]) -> float:
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, command
    return float(command[1])


def test_stopping_a_pod_drains_within_the_grace_period() -> None:
    """preStop sleeps while the pod still serves (the balancer and the endpoints drop it),
    then SIGTERM drains for up to --exit-timeout-secs: the grace period covers both, and
    the liveness probe does not fail for the whole drain (the listener is closed)."""
    containers = _containers()
    exit_timeout = float(_flag(_args("service"), "--exit-timeout-secs"))
    assert float(_flag(_args("gateway"), "--exit-timeout-secs")) == exit_timeout
    grace = _pod()["terminationGracePeriodSeconds"]
    for container in containers.values():
        pre_stop = _pre_stop_seconds(container)
        assert pre_stop > 0 and pre_stop + exit_timeout < grace, container["name"]
        liveness = container["livenessProbe"]
        assert liveness["periodSeconds"] * liveness["failureThreshold"] > exit_timeout
    balancer = _containers("triton-balancer")["nginx"]
    assert _pre_stop_seconds(balancer) < _pod("triton-balancer")["terminationGracePeriodSeconds"]


def test_disruption_budgets_and_autoscaler() -> None:
    assert _one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert _one("PodDisruptionBudget", "triton-balancer")["spec"]["maxUnavailable"] == 1
    assert "replicas" not in _one("Deployment")["spec"], "the autoscaler owns the count"
    hpa = _one("HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": SERVER}
    assert 2 <= hpa["minReplicas"] < hpa["maxReplicas"]


def _adapter_rules() -> list[dict[str, Any]]:
    config = yaml.safe_load((K8S / "prometheus-adapter" / "config.yaml").read_text())
    return list(yaml.safe_load(config["data"]["config.yaml"])["rules"])


def test_autoscaler_metrics_come_from_the_adapter_rules(default_server: ServerProcess) -> None:
    """Each metric the HPA reads is one an adapter rule makes, from series the server's own
    /metrics endpoint exports."""
    rules = {rule["name"]["as"]: rule for rule in _adapter_rules()}
    metrics = _one("HorizontalPodAutoscaler")["spec"]["metrics"]
    assert {m["type"] for m in metrics} == {"Pods"}
    assert {m["pods"]["metric"]["name"] for m in metrics} <= set(rules)
    with grpcclient.InferenceServerClient(default_server.url) as client:  # one request,
        ones = np.ones((1, 4), np.float32)
        client.infer("add_sub", add_sub_inputs(ones, ones))  # for counters
    _, _, body = http_get(f"http://127.0.0.1:{metrics_port(default_server)}/metrics")
    exported = {line.split("{")[0] for line in body.decode().splitlines() if line[:1] != "#"}
    for rule in rules.values():
        series = re.findall(r"nv_[a-z_]+", rule["seriesQuery"] + rule["metricsQuery"])
        assert series and set(series) <= exported, (series, rule)
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}


def test_balancer_config_is_the_rendered_template() -> None:
    """balancer/nginx.conf is what render.py makes of the template (no drift), and names
    the headless Service and the ports the balancer's pod and Service declare."""
    rendered = subprocess.run(
        [sys.executable, str(DEPLOY / "nginx" / "render.py"), *BALANCER_RENDER],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shipped = (K8S / "balancer" / "nginx.conf").read_text()
    assert shipped == rendered, "re-render deploy/k8s/balancer/nginx.conf (kustomization.yaml)"
    headless = _one("Service", "triton-compatible-server-replicas")
    assert headless["spec"]["clusterIP"] == "None"
    assert BALANCER_HOST.startswith(headless["metadata"]["name"] + ".")
    server_ports = {p["name"]: p["port"] for p in headless["spec"]["ports"]}
    assert f"server {BALANCER_HOST}:{server_ports['grpc']} resolve" in shipped
    assert f"server {BALANCER_HOST}:{server_ports['http']} resolve" in shipped
    listens = {int(port) for port in re.findall(r"listen (\d+)", shipped)}
    assert listens == set(_ports(_containers("triton-balancer")["nginx"]).values())
    volume = _pod("triton-balancer")["volumes"][0]["configMap"]["name"]
    assert [g["name"] for g in _kustomization()["configMapGenerator"]] == [volume]


@pytest.mark.skipif(nginx_missing() is not None, reason=str(nginx_missing()))
def test_the_template_passes_nginx_t(tmp_path: Path) -> None:
    """The template rendered for loopback replicas is valid to the installed nginx."""
    conf = tmp_path / "nginx.conf"
    subprocess.run(
        [
            sys.executable,
            str(DEPLOY / "nginx" / "render.py"),
            *("--grpc-server", "127.0.0.1:9001", "--grpc-server", "127.0.0.1:9002"),
            *("--http-server", "127.0.0.1:9101", "--http-server", "127.0.0.1:9102"),
            *("--grpc-listen", "127.0.0.1:9801", "--http-listen", "127.0.0.1:9800"),
            *("-o", str(conf)),
        ],
        check=True,
    )
    for sub in ("logs", "temp"):
        (tmp_path / sub).mkdir()
    nginx = find_nginx()
    assert nginx is not None
    done = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", "logs/error.log"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "syntax is ok" in done.stderr


def test_manifests_validate_against_the_kubernetes_schemas() -> None:
    """kubectl apply --dry-run=client needs an API server, which no machine of the
    project has; kubernetes-validate checks the same objects offline against the
    Kubernetes OpenAPI schemas (strict: unknown fields fail)."""
    docs = [*_documents(), yaml.safe_load((K8S / "prometheus-adapter" / "config.yaml").read_text())]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.32", strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_builds_and_wires_the_generated_config() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True
    ).stdout
    docs = [d for d in yaml.safe_load_all(built) if d is not None]
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert config["data"]["nginx.conf"] == (K8S / "balancer" / "nginx.conf").read_text()
    (balancer,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "triton-balancer"
    ]
    volume = balancer["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    assert volume == config["metadata"]["name"]  # the hashed name, so a change rolls the pods
    for doc in docs:
        kubernetes_validate.validate(doc, "1.32", strict=True)


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
